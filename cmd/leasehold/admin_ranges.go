package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/leasehold/leasehold"
)

func (a *adminCmd) rangesRetry(fs *flag.FlagSet) verbFunc {
	failed := fs.String("failed", "", "retry every failed range of this group instead of one range by ID")
	return func(ctx context.Context, args []string) error {
		if *failed != "" {
			if err := wantArgs(args); err != nil {
				return err
			}
			return a.retryFailed(ctx, *failed)
		}
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		id, err := parseInt("ID", args[0])
		if err != nil {
			return err
		}
		r, err := a.c.RetryRange(ctx, id)
		if err != nil {
			return err
		}
		if a.op.json {
			return a.printJSON(r)
		}
		fmt.Fprintf(a.stdout, "range %d planned again\n", id)
		return nil
	}
}

// retryFailed plans every failed range of group again, one call per range
// (the API has no bulk form), and says how many. It stops at the first
// refusal, saying how many went through before it, so the operator knows
// where it stood.
func (a *adminCmd) retryFailed(ctx context.Context, group string) error {
	rs, err := a.c.AllRanges(ctx, group, leasehold.StatusFailed)
	if err != nil {
		return err
	}
	retried := make([]leasehold.Range, 0, len(rs))
	for _, r := range rs {
		got, err := a.c.RetryRange(ctx, r.ID)
		if err != nil {
			return fmt.Errorf("range %d: %w (%d of %d failed ranges of %s retried before it)", r.ID, err, len(retried), len(rs), group)
		}
		retried = append(retried, *got)
	}
	if a.op.json {
		return a.printJSON(retried)
	}
	fmt.Fprintf(a.stdout, "group %s: %d failed range(s) planned again\n", group, len(retried))
	return nil
}
