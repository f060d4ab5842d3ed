package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/leasehold/leasehold/source/binaries"
)

func (a *adminCmd) rulesShow(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	r, err := a.c.CurrentRules(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(r)
	}
	fmt.Fprintf(a.stdout, "rules version %d\n", r.Version)
	return a.printJSON(r.Body)
}

func (a *adminCmd) rulesPut(ctx context.Context, args []string) error {
	if err := wantArgs(args, "FILE|-"); err != nil {
		return err
	}
	var body []byte
	var err error
	if args[0] == "-" {
		body, err = io.ReadAll(os.Stdin)
	} else {
		body, err = os.ReadFile(args[0])
	}
	if err != nil {
		return err
	}
	if !json.Valid(body) {
		return usageError(fmt.Errorf("rules put: %s is not JSON", args[0]))
	}
	// The Usenet workers' section is read here as they will read it, so
	// an expression that does not compile is refused before any lease
	// carries it.
	if _, err := binaries.ParseRules(body); err != nil {
		return usageError(fmt.Errorf("rules put: %s: %v", args[0], err))
	}
	v, err := a.c.PutRules(ctx, body)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(map[string]int64{"version": v})
	}
	fmt.Fprintf(a.stdout, "rules version %d stored\n", v)
	return nil
}
