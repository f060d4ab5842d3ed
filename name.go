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
