package main

import (
	"context"
	"flag"
	"fmt"
)

// fleetRemove removes a member from the fleet for good.
func (a *adminCmd) fleetRemove(fs *flag.FlagSet) verbFunc {
	force := fs.Bool("force", false, "remove it even while it runs (it is told, and leaves the fleet)")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args, "NAME"); err != nil {
			return err
		}
		if err := a.c.RemoveMember(ctx, args[0], *force); err != nil {
			return forceHint(err, *force)
		}
		if a.op.json {
			return a.printJSON(map[string]any{"removed": args[0]})
		}
		fmt.Fprintf(a.stdout, "node %s removed from the fleet; its groups go to the others (leasehold admin fleet approve %s undoes it)\n", args[0], args[0])
		return nil
	}
}

// fleetApprove undoes a member's removal.
func (a *adminCmd) fleetApprove(ctx context.Context, args []string) error {
	if err := wantArgs(args, "NAME"); err != nil {
		return err
	}
	if err := a.c.ApproveMember(ctx, args[0]); err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(map[string]any{"approved": args[0]})
	}
	fmt.Fprintf(a.stdout, "node %s approved again: it may rejoin the fleet\n", args[0])
	return nil
}
