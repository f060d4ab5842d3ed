package main

import (
	"context"
	"fmt"
)

func (a *adminCmd) rangesRetry(ctx context.Context, args []string) error {
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
