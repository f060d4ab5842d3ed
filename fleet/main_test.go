package fleet

import (
	"flag"
	"os"
	"testing"
)

// fleetParallel is how many of this package's parallel tests run at once
// unless -parallel says otherwise. go test's default is one a core, but
// these tests mostly wait (NATS elections, claim TTLs, a server's
// return): under -race on two cores the package used about 115 s of CPU
// in 230 s with two at a time, and four at a time took it to 160 s with
// every test passing. The tests whose bounds time a renewal or a
// takeover on a loaded machine are serial, and run before these.
const fleetParallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", fleetParallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
