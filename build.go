// The running build of leasehold (Build): its version,
// the VCS revision and commit time it was built from, and the Go version.
// `leasehold version`, /metrics (leasehold_build_info), the dashboard's
// footer and the workers' User-Agent all read it, so they agree.
//
// A release build sets the three variables with -ldflags -X
// (scripts/release.sh); a plain `go build` in a checkout takes the
// revision and time from the Go toolchain's VCS stamp when it has one
// (-buildvcs, off on some machines through GOFLAGS), and the version from
// the module when built as a dependency (`go install …@v1.2.3`).

package leasehold

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Set by the release build:
//
//	-ldflags "-X github.com/leasehold/leasehold.buildVersion=v1.2.3
//	          -X github.com/leasehold/leasehold.buildRevision=<sha>
//	          -X github.com/leasehold/leasehold.buildDate=<RFC 3339>"
var (
	buildVersion  = ""
	buildRevision = ""
	buildDate     = ""
)

// BuildInfo is one build's identity. Unknown parts are "unknown", never empty,
// so labels and columns always have a value.
type BuildInfo struct {
	Version   string // v1.2.3, or "dev" for a checkout
	Revision  string // the full commit hash, "+dirty" when the tree had changes
	Date      string // the commit's time (RFC 3339, UTC)
	GoVersion string
}

var (
	buildOnce sync.Once
	buildInfo BuildInfo
)

// Build returns the running build's identity.
func Build() BuildInfo {
	buildOnce.Do(func() { buildInfo = readBuild(buildVersion, buildRevision, buildDate) })
	return buildInfo
}

func readBuild(version, revision, date string) BuildInfo {
	i := BuildInfo{Version: version, Revision: revision, Date: date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Revision == "" {
					i.Revision = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && revision == "" && i.Revision != "" {
			i.Revision += "+dirty"
		}
		// A module built as a dependency knows its version; a checkout
		// says "(devel)".
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Revision == "" {
		i.Revision = "unknown"
	}
	if i.Date == "" {
		i.Date = "unknown"
	}
	return i
}

// Short is the revision's first 12 characters (and "+dirty"), for a
// footer or a User-Agent.
func (i BuildInfo) Short() string {
	r, dirty := strings.CutSuffix(i.Revision, "+dirty")
	if len(r) > 12 {
		r = r[:12]
	}
	if dirty {
		r += "+dirty"
	}
	return r
}

// String is the one line `leasehold version` prints.
func (i BuildInfo) String() string {
	return "leasehold " + i.Version + " (revision " + i.Revision + ", " + i.Date + ", " + i.GoVersion + ")"
}

// UserAgent is what a worker of this build sends: the program, its
// version and short revision, e.g. "leasehold-worker/v1.2.3 (abcdef012345)".
func (i BuildInfo) UserAgent(program string) string {
	return program + "/" + i.Version + " (" + i.Short() + ")"
}
