// Command apicheck checks the answers recorded in a directory against
// web/openapi.json, as the Go tests' answers are checked after their run
// (nodetest.CheckRecorded): scripts/test.sh runs the TypeScript client's
// tests with LEASEHOLD_API_RECORD set to a directory, then
//
//	go run ./internal/nodetest/apicheck DIR
//
// It exits 1 when an answer does not fit the description or when nothing
// was recorded.
package main

import (
	"fmt"
	"os"

	"github.com/leasehold/leasehold/internal/nodetest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apicheck DIR (the recorded exchanges, *.jsonl)")
		os.Exit(2)
	}
	sum, err := nodetest.CheckRecorded(os.Args[1])
	fmt.Fprint(os.Stderr, sum)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: answers that do not fit web/openapi.json:\n"+err.Error())
		os.Exit(1)
	}
}
