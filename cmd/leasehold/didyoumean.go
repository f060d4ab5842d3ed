package main

import "strings"

// didYouMean suggests the admin command a mistyped noun meant, for the
// error line: the nouns are plural ("group list" → "groups list"), and a
// noun's singular or a near spelling is the commonest slip. "" when
// nothing is near.
func didYouMean(noun, verb string) string {
	seen := map[string]bool{}
	for _, v := range adminVerbs {
		if seen[v.noun] || v.noun == noun {
			continue
		}
		seen[v.noun] = true
		if strings.TrimSuffix(v.noun, "s") == strings.TrimSuffix(noun, "s") || editDistance(noun, v.noun) <= 2 {
			if _, ok := lookupVerb(v.noun, verb); ok || verb == "" {
				return "; did you mean \"" + strings.TrimSpace("admin "+v.noun+" "+verb) + "\"?"
			}
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (short words).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
