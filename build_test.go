package leasehold

import (
	"runtime"
	"testing"
)

// TestBuildRead: what the release build sets wins; what nobody set reads
// "dev" and "unknown", never empty (a label or a column always has one).
func TestBuildRead(t *testing.T) {
	t.Parallel()
	i := readBuild("v1.2.3", "0123456789abcdef0123", "2026-12-06T12:00:00Z")
	if i.Version != "v1.2.3" || i.Revision != "0123456789abcdef0123" || i.Date != "2026-12-06T12:00:00Z" || i.GoVersion != runtime.Version() {
		t.Fatalf("readBuild(set) = %+v", i)
	}
	if got, want := i.String(), "leasehold v1.2.3 (revision 0123456789abcdef0123, 2026-12-06T12:00:00Z, "+runtime.Version()+")"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := i.UserAgent("leasehold-worker"), "leasehold-worker/v1.2.3 (0123456789ab)"; got != want {
		t.Errorf("UserAgent() = %q, want %q", got, want)
	}
	// A test binary has no VCS stamp and no module version.
	i = readBuild("", "", "")
	if i.Version != "dev" || i.Revision == "" || i.Date == "" || i.GoVersion == "" {
		t.Fatalf("readBuild(unset) = %+v", i)
	}
	if got := (BuildInfo{Revision: "0123456789abcdef+dirty"}).Short(); got != "0123456789ab+dirty" {
		t.Errorf("Short() = %q", got)
	}
}
