package leasehold

// ValidGroupName reports whether name is a group name the API accepts:
// 1–255 bytes of A-Za-z0-9._+- starting with a letter or digit.
func ValidGroupName(name string) bool {
	if len(name) == 0 || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '.' && c != '_' && c != '+' && c != '-' {
			return false
		}
	}
	return true
}

// ValidNodeName reports whether name is a node name the API accepts: the
// same alphabet as group names, 1–128 bytes.
func ValidNodeName(name string) bool {
	return len(name) <= 128 && ValidGroupName(name)
}

// SourceKind is the kind of source a group is read from and a node's
// worker reads (rule 12): "default", "nntp" or an operator's own. It is
// what the API, the CLI and the docs mean by a bare "kind". An alias, so
// the catalog, the wire and the flags carry it as the string it is.
type SourceKind = string

// DefaultSourceKind is the kind of a group made without one, and the one kind of
// a node registered without any: the synthetic and example workers' kind.
const DefaultSourceKind SourceKind = "default"

// SourceKindNNTP is the kind of the Usenet worker's groups: they are read from a
// news server.
const SourceKindNNTP SourceKind = "nntp"

// MaxNodeKinds is the most kinds one node reads.
const MaxNodeKinds = 16

// ValidSourceKind reports whether kind names a source kind (rule 12): 1–32
// bytes of a-z0-9-.
func ValidSourceKind(kind SourceKind) bool {
	if len(kind) == 0 || len(kind) > 32 {
		return false
	}
	for i := 0; i < len(kind); i++ {
		c := kind[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// HasSourceKind reports whether kinds holds kind.
func HasSourceKind(kinds []SourceKind, kind SourceKind) bool {
	for _, k := range kinds {
		if k == kind {
			return true
		}
	}
	return false
}
