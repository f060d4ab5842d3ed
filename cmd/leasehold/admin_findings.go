package main

import (
	"context"
	"fmt"
)

func (a *adminCmd) findings(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	f, err := a.c.Findings(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(f)
	}
	fmt.Fprintf(a.stdout, "backlog: %d planned ranges waiting, oldest %s\n", f.Backlog.Planned, seconds(f.Backlog.OldestAgeS))
	if len(f.Stuck) == 0 {
		fmt.Fprintln(a.stdout, "nothing stuck")
		return nil
	}
	return a.table([]string{"KIND", "GROUP", "RANGE", "NODE", "AGE", "DETAIL"}, len(f.Stuck), func(i int) []any {
		s := f.Stuck[i]
		return []any{s.Kind, s.Group, optInt(s.Range), s.Node, seconds(s.AgeS), s.Detail}
	})
}
