package binaries

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// Rules are the Usenet section of the node's rules document, the JSON
// object `admin rules put` stores and every lease carries:
//
//	{"usenet": {
//	  "groups": {"alt.binaries.example": {
//	    "release": "^\\[(?P<release>[^\\]]+)\\]",
//	    "file": "\"(?P<name>[^\"]+)\""}},
//	  "blacklist": {"posters": ["@spam\\.example$"], "subjects": ["(?i)password"]}}}
//
// A group's release expression names the release by its group
// `release`, its file expression names the file by its group `name`;
// both are tried on the subject (RFC 2047 decoded) before the built-in
// reading, which still finds the counters and fills in what they do not
// match. A post whose poster or subject matches the blacklist is skipped
// and counted. Expressions are Go's (RE2). The rules of a file
// cross-posted to several groups are those of the first of its groups in
// byte order that has any, so every group's window reads it alike.
type Rules struct {
	groups            map[string]groupRules
	posters, subjects []*regexp.Regexp
}

type groupRules struct{ release, file *regexp.Regexp }

// rulesDoc is the JSON form of Rules.
type rulesDoc struct {
	Groups map[string]struct {
		Release string `json:"release"`
		File    string `json:"file"`
	} `json:"groups"`
	Blacklist struct {
		Posters  []string `json:"posters"`
		Subjects []string `json:"subjects"`
	} `json:"blacklist"`
}

// ParseRules reads the "usenet" section of a rules document; nil, and
// no error, when the document has none. An expression that does not
// compile, or lacks its named group, is an error naming where it stands.
func ParseRules(body []byte) (*Rules, error) {
	if len(bytes.TrimSpace(body)) == 0 || bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("rules: not a JSON object: %w", err)
	}
	sec, ok := top["usenet"]
	if !ok || bytes.Equal(bytes.TrimSpace(sec), []byte("null")) {
		return nil, nil
	}
	var doc rulesDoc
	dec := json.NewDecoder(bytes.NewReader(sec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf(`rules: "usenet" is {"groups": {GROUP: {"release": RE, "file": RE}}, "blacklist": {"posters": [RE], "subjects": [RE]}}: %w`, err)
	}
	r := &Rules{groups: map[string]groupRules{}}
	compile := func(where, expr, group string) (*regexp.Regexp, error) {
		if expr == "" {
			return nil, nil
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("rules: usenet %s: %w", where, err)
		}
		if group != "" && re.SubexpIndex(group) < 0 {
			return nil, fmt.Errorf("rules: usenet %s: %q has no group named %s, as (?P<%s>…)", where, expr, group, group)
		}
		return re, nil
	}
	for g, gr := range doc.Groups {
		rel, err := compile(fmt.Sprintf("groups %q release", g), gr.Release, "release")
		if err != nil {
			return nil, err
		}
		file, err := compile(fmt.Sprintf("groups %q file", g), gr.File, "name")
		if err != nil {
			return nil, err
		}
		r.groups[g] = groupRules{release: rel, file: file}
	}
	for i, e := range doc.Blacklist.Posters {
		re, err := compile(fmt.Sprintf("blacklist posters[%d]", i), e, "")
		if err != nil {
			return nil, err
		}
		r.posters = append(r.posters, re)
	}
	for i, e := range doc.Blacklist.Subjects {
		re, err := compile(fmt.Sprintf("blacklist subjects[%d]", i), e, "")
		if err != nil {
			return nil, err
		}
		r.subjects = append(r.subjects, re)
	}
	return r, nil
}

// Blacklisted reports whether the node's blacklist skips a post.
func (r *Rules) Blacklisted(poster, subject string) bool {
	if r == nil {
		return false
	}
	match := func(res []*regexp.Regexp, s string) bool {
		return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
	}
	return match(r.posters, poster) || match(r.subjects, subject)
}

// Read reads a subject of a post in groups (sorted): the built-in
// reading, with the release and file names of the first group's rules
// that match put first.
func (r *Rules) Read(groups []string, subject string) Reading {
	rd := ReadSubject(subject)
	if r == nil || len(r.groups) == 0 {
		return rd
	}
	for _, g := range groups {
		gr, ok := r.groups[g]
		if !ok {
			continue
		}
		if v := named(gr.file, rd.Subject, "name"); v != "" {
			rd.Name = v
		}
		if v := named(gr.release, rd.Subject, "release"); v != "" {
			rd.Release = v
		}
		break
	}
	return rd
}

// named is what re's group name matched in s, "" when re is nil or does
// not match.
func named(re *regexp.Regexp, s, name string) string {
	if re == nil {
		return ""
	}
	m := re.FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[re.SubexpIndex(name)]
}
