package newznab

import (
	"encoding/xml"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What indexer managers and downloaders read of the answers (Prowlarr's
// and NZBHydra2's newznab parsers): parsed here with the namespaces
// spelled out, as theirs do, not with this package's own types.

type parsedFeed struct {
	XMLName xml.Name `xml:"rss"`
	Version string   `xml:"version,attr"`
	Channel struct {
		Response struct {
			Offset string `xml:"offset,attr"`
			Total  int    `xml:"total,attr"`
		} `xml:"http://www.newznab.com/DTD/2010/feeds/attributes/ response"`
		Items []parsedItem `xml:"item"`
	} `xml:"channel"`
}

type parsedItem struct {
	Title    string `xml:"title"`
	GUID     string `xml:"guid"`
	Link     string `xml:"link"`
	Comments string `xml:"comments"`
	PubDate  string `xml:"pubDate"`
	Category string `xml:"category"`
	Encl     struct {
		URL    string `xml:"url,attr"`
		Length string `xml:"length,attr"`
		Type   string `xml:"type,attr"`
	} `xml:"enclosure"`
	Attrs []struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	} `xml:"http://www.newznab.com/DTD/2010/feeds/attributes/ attr"`
}

func (it parsedItem) attr(name string) []string {
	var out []string
	for _, a := range it.Attrs {
		if a.Name == name {
			out = append(out, a.Value)
		}
	}
	if out == nil {
		out = []string{""}
	}
	return out
}

type parsedCaps struct {
	XMLName xml.Name `xml:"caps"`
	Limits  struct {
		Max     string `xml:"max,attr"`
		Default string `xml:"default,attr"`
	} `xml:"limits"`
	Searching struct {
		Search      parsedAbility `xml:"search"`
		TVSearch    parsedAbility `xml:"tv-search"`
		MovieSearch parsedAbility `xml:"movie-search"`
	} `xml:"searching"`
	Categories []struct {
		ID      string `xml:"id,attr"`
		Name    string `xml:"name,attr"`
		Subcats []struct {
			ID   string `xml:"id,attr"`
			Name string `xml:"name,attr"`
		} `xml:"subcat"`
	} `xml:"categories>category"`
}

type parsedAbility struct {
	Available       string `xml:"available,attr"`
	SupportedParams string `xml:"supportedParams,attr"`
}

// TestShapes: caps, feeds and errors have the shapes newznab clients
// parse: caps' searching and categories; each item's enclosure (the NZB's
// URL, its size, application/x-nzb) and newznab:attr (category, size,
// poster, group, files, usenetdate, guid); well-formed XML (xmllint when
// installed).
func TestShapes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	status, body, _ := w.call(t, "t=caps")
	if status != 200 {
		t.Fatalf("t=caps: %d %s", status, body)
	}
	var c parsedCaps
	if err := xml.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Limits.Max != "100" || c.Limits.Default != "100" {
		t.Errorf("limits %+v", c.Limits)
	}
	if c.Searching.Search.Available != "yes" || !strings.Contains(c.Searching.Search.SupportedParams, "q") ||
		c.Searching.TVSearch.Available != "yes" || c.Searching.TVSearch.SupportedParams != "q,season,ep" ||
		c.Searching.MovieSearch.Available != "yes" || c.Searching.MovieSearch.SupportedParams != "q" {
		t.Errorf("searching %+v", c.Searching)
	}
	cats := map[string]string{}
	for _, p := range c.Categories {
		cats[p.ID] = p.Name
		for _, s := range p.Subcats {
			if !strings.HasPrefix(s.ID, p.ID[:1]) || len(s.ID) != 4 {
				t.Errorf("subcat %s under %s", s.ID, p.ID)
			}
			cats[s.ID] = s.Name
		}
	}
	for id, name := range map[string]string{"2000": "Movies", "2040": "HD", "3000": "Audio", "4000": "PC", "5000": "TV", "5030": "SD", "5040": "HD", "7000": "Books", "7020": "Ebook", "8000": "Other", "8010": "Misc"} {
		if cats[id] != name {
			t.Errorf("category %s is %q, want %q", id, cats[id], name)
		}
	}
	checkXML(t, "caps", body)

	status, body, _ = w.call(t, "t=search&q=film")
	if status != 200 {
		t.Fatalf("t=search: %d %s", status, body)
	}
	checkXML(t, "search", body)
	var f parsedFeed
	if err := xml.Unmarshal(body, &f); err != nil {
		t.Fatal(err)
	}
	if f.Version != "2.0" || f.Channel.Response.Offset != "0" || f.Channel.Response.Total != 1 || len(f.Channel.Items) != 1 {
		t.Fatalf("the feed: %s", body)
	}
	it, r := f.Channel.Items[0], w.rels["a3"]
	get, err := url.Parse(it.Encl.URL)
	if err != nil || get.Query().Get("t") != "get" || get.Query().Get("id") != "a3" || get.Query().Get("apikey") != w.key || !strings.HasPrefix(it.Encl.URL, w.url+"/api?") {
		t.Errorf("enclosure URL %q", it.Encl.URL)
	}
	if it.Encl.Length != strconv.FormatInt(r.Bytes, 10) || it.Encl.Type != "application/x-nzb" || it.Link != it.Encl.URL {
		t.Errorf("enclosure %+v, link %q", it.Encl, it.Link)
	}
	if it.Title != r.Name || it.GUID == "" || it.Category != "Movies > HD" {
		t.Errorf("item %+v", it)
	}
	if _, err := time.Parse(time.RFC1123Z, it.PubDate); err != nil {
		t.Errorf("pubDate %q: %v", it.PubDate, err)
	}
	for name, want := range map[string]string{"size": "4000", "files": "2", "poster": r.Poster, "group": "alt.binaries.movies", "guid": "a3",
		"usenetdate": testNow.Add(-3 * time.Hour).Format(time.RFC1123Z)} {
		if got := it.attr(name); len(got) != 1 || got[0] != want {
			t.Errorf("newznab:attr %s = %q, want %q", name, got, want)
		}
	}
	if got := strings.Join(it.attr("category"), ","); got != "2000,2040" {
		t.Errorf("newznab:attr category = %s, want 2000,2040", got)
	}
	// The enclosure's URL fetches the NZB as it stands.
	status, nzb, _ := w.call(t, get.RawQuery)
	if status != 200 {
		t.Fatalf("the enclosure: %d %s", status, nzb)
	}
	checkXML(t, "get", nzb)

	status, body, _ = w.call(t, "t=search&apikey=wrong")
	if status != 401 {
		t.Fatalf("a wrong key: %d", status)
	}
	checkXML(t, "error", body)
	var e struct {
		XMLName     xml.Name `xml:"error"`
		Code        string   `xml:"code,attr"`
		Description string   `xml:"description,attr"`
	}
	if err := xml.Unmarshal(body, &e); err != nil || e.Code != "100" || e.Description != "Incorrect user credentials" {
		t.Errorf("the error %s (%v)", body, err)
	}
}

// checkXML checks doc is well-formed XML with xmllint, when installed.
func checkXML(t *testing.T, name string, doc []byte) {
	t.Helper()
	if _, err := exec.LookPath("xmllint"); err != nil {
		return
	}
	p := filepath.Join(t.TempDir(), name+".xml")
	if err := os.WriteFile(p, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("xmllint", "--noout", "--nonet", p).CombinedOutput(); err != nil {
		t.Errorf("xmllint %s: %v\n%s", name, err, out)
	}
}
