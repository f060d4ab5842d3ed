package main

import (
	"context"
	"flag"
	"fmt"
)

func (a *adminCmd) rotateAdminToken(fs *flag.FlagSet) verbFunc {
	quiet := fs.Bool("q", false, "print only the token")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		token, err := a.c.RotateAdminToken(ctx)
		switch {
		case err != nil:
			return err
		case *quiet:
			fmt.Fprintln(a.stdout, token)
			return nil
		case a.op.json:
			return a.printJSON(map[string]string{"token": token})
		}
		fmt.Fprintf(a.stdout, "the node has a new admin token; the old one and every dashboard session are refused from now on\n"+
			"token: %s\n(a node keeping its token in <data>/admin.token or --admin-token-file has written it there)\n", token)
		return nil
	}
}
