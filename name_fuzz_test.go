package leasehold_test

import (
	"regexp"
	"testing"

	"github.com/leasehold/leasehold"
)

// groupNameRE is API.md's rule for group names, written independently of
// ValidGroupName: 1–255 bytes of A-Za-z0-9._+-, starting with a letter or
// digit.
var groupNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$`)

// FuzzValidGroupName holds ValidGroupName to the documented rule, and
// ValidNodeName to the same rule capped at 128 bytes.
func FuzzValidGroupName(f *testing.F) {
	for _, s := range []string{"", "a", "alt.binaries.test", "-a", ".a", "a-", "A_b+c.d-9", "a b", "é", "a\x00",
		string(make([]byte, 255)), "x\n", "0", "_", "+", "a/b"} {
		f.Add(s)
	}
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'x'
	}
	f.Add(string(long))
	f.Add(string(long[:255]))
	f.Add(string(long[:129]))
	f.Add(string(long[:128]))
	f.Fuzz(func(t *testing.T, name string) {
		want := groupNameRE.MatchString(name)
		if got := leasehold.ValidGroupName(name); got != want {
			t.Fatalf("ValidGroupName(%q) = %v, want %v", name, got, want)
		}
		wantNode := want && len(name) <= 128
		if got := leasehold.ValidNodeName(name); got != wantNode {
			t.Fatalf("ValidNodeName(%q) = %v, want %v", name, got, wantNode)
		}
	})
}
