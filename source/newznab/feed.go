package newznab

import (
	"encoding/xml"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/source/binaries"
)

// The answers' shapes: RSS 2.0 with newznab's attributes, the shape
// every downloader and indexer manager parses, and caps.

// NewznabNS is the namespace of newznab's attributes in RSS.
const NewznabNS = "http://www.newznab.com/DTD/2010/feeds/attributes/"

// RSS is a search's answer.
type RSS struct {
	XMLName xml.Name `xml:"rss"`
	Version string   `xml:"version,attr"`
	Atom    string   `xml:"xmlns:atom,attr"`
	Newznab string   `xml:"xmlns:newznab,attr"`
	Channel Channel  `xml:"channel"`
}

// Channel is the feed: what it is and its items.
type Channel struct {
	AtomLink    AtomLink `xml:"atom:link"`
	Title       string   `xml:"title"`
	Description string   `xml:"description"`
	Link        string   `xml:"link"`
	Language    string   `xml:"language"`
	Response    Response `xml:"newznab:response"`
	Items       []Item   `xml:"item"`
}

// AtomLink is the feed's own address.
type AtomLink struct {
	Href string `xml:"href,attr"`
	Rel  string `xml:"rel,attr"`
	Type string `xml:"type,attr"`
}

// Response says which page of how many matches the items are.
type Response struct {
	Offset int `xml:"offset,attr"`
	Total  int `xml:"total,attr"`
}

// Item is one release.
type Item struct {
	Title       string    `xml:"title"`
	GUID        GUID      `xml:"guid"`
	Link        string    `xml:"link"`
	Comments    string    `xml:"comments"`
	PubDate     string    `xml:"pubDate"`
	Category    string    `xml:"category"`
	Description string    `xml:"description"`
	Enclosure   Enclosure `xml:"enclosure"`
	Attrs       []Attr    `xml:"newznab:attr"`
}

// GUID is an item's identity: its details page.
type GUID struct {
	IsPermaLink bool   `xml:"isPermaLink,attr"`
	URL         string `xml:",chardata"`
}

// Enclosure is the release's NZB.
type Enclosure struct {
	URL    string `xml:"url,attr"`
	Length int64  `xml:"length,attr"`
	Type   string `xml:"type,attr"`
}

// Attr is a newznab attribute of an item.
type Attr struct {
	Name  string `xml:"name,attr" json:"name"`
	Value string `xml:"value,attr" json:"value"`
}

// nzbType is the media type of an NZB.
const nzbType = "application/x-nzb"

// item is a release as an item, its links on base with the caller's key.
func item(base, apikey string, r release) Item {
	get := base + "/api?t=get&id=" + url.QueryEscape(r.Key) + "&apikey=" + url.QueryEscape(apikey)
	details := base + "/api?t=details&id=" + url.QueryEscape(r.Key) + "&apikey=" + url.QueryEscape(apikey)
	date := r.Posted.UTC().Format(time.RFC1123Z)
	attrs := []Attr{}
	if p := binaries.CategoryParent(r.Category); p != r.Category && p > 0 {
		attrs = append(attrs, Attr{"category", strconv.Itoa(p)})
	}
	attrs = append(attrs,
		Attr{"category", strconv.Itoa(r.Category)},
		Attr{"size", strconv.FormatInt(r.Bytes, 10)},
		Attr{"files", strconv.Itoa(r.Files)},
		Attr{"poster", r.Poster},
		Attr{"group", r.Group},
		Attr{"usenetdate", date},
		Attr{"guid", r.Key},
		Attr{"grabs", "0"},
	)
	return Item{
		Title: r.Name, GUID: GUID{IsPermaLink: true, URL: details}, Link: get, Comments: details,
		PubDate: date, Category: categoryName(r.Category), Description: r.Name,
		Enclosure: Enclosure{URL: get, Length: r.Bytes, Type: nzbType}, Attrs: attrs,
	}
}

// categoryName is "TV > HD" for 5040, "TV" for 5000.
func categoryName(c int) string {
	p := binaries.CategoryParent(c)
	name, ok := binaries.CategoryNames[c]
	if !ok {
		return "Other"
	}
	if p == c {
		return name
	}
	return binaries.CategoryNames[p] + " > " + name
}

// Caps is t=caps's answer: what the API can do.
type Caps struct {
	XMLName      xml.Name     `xml:"caps"`
	Server       CapsServer   `xml:"server"`
	Limits       Limits       `xml:"limits"`
	Registration Registration `xml:"registration"`
	Searching    Searching    `xml:"searching"`
	Categories   []Category   `xml:"categories>category"`
}

// CapsServer names the server.
type CapsServer struct {
	Version   string `xml:"version,attr"`
	Title     string `xml:"title,attr"`
	Strapline string `xml:"strapline,attr"`
}

// Limits are a search's most and default items.
type Limits struct {
	Max     int `xml:"max,attr"`
	Default int `xml:"default,attr"`
}

// Registration says no one registers here: keys come from the operator.
type Registration struct {
	Available string `xml:"available,attr"`
	Open      string `xml:"open,attr"`
}

// Searching is the search functions and the parameters each takes.
type Searching struct {
	Search      Ability `xml:"search"`
	TVSearch    Ability `xml:"tv-search"`
	MovieSearch Ability `xml:"movie-search"`
	AudioSearch Ability `xml:"audio-search"`
	BookSearch  Ability `xml:"book-search"`
}

// Ability is one search function.
type Ability struct {
	Available       string `xml:"available,attr"`
	SupportedParams string `xml:"supportedParams,attr"`
}

// Category is a parent category with its children.
type Category struct {
	ID      int      `xml:"id,attr"`
	Name    string   `xml:"name,attr"`
	Subcats []Subcat `xml:"subcat"`
}

// Subcat is a child category.
type Subcat struct {
	ID   int    `xml:"id,attr"`
	Name string `xml:"name,attr"`
}

// caps is the API's caps.
func caps(title string) Caps {
	byParent := map[int]*Category{}
	var parents []int
	for c, name := range binaries.CategoryNames {
		if binaries.CategoryParent(c) == c {
			byParent[c] = &Category{ID: c, Name: name}
			parents = append(parents, c)
		}
	}
	slices.Sort(parents)
	var children []int
	for c := range binaries.CategoryNames {
		if binaries.CategoryParent(c) != c {
			children = append(children, c)
		}
	}
	slices.Sort(children)
	for _, c := range children {
		p := byParent[binaries.CategoryParent(c)]
		p.Subcats = append(p.Subcats, Subcat{ID: c, Name: binaries.CategoryNames[c]})
	}
	out := Caps{
		Server:       CapsServer{Version: "1.0", Title: title, Strapline: "a Usenet index made by leasehold's workers"},
		Limits:       Limits{Max: MaxLimit, Default: MaxLimit},
		Registration: Registration{Available: "no", Open: "no"},
		Searching: Searching{
			Search:      Ability{"yes", "q,group"},
			TVSearch:    Ability{"yes", "q,season,ep"},
			MovieSearch: Ability{"yes", "q"},
			AudioSearch: Ability{"no", ""},
			BookSearch:  Ability{"no", ""},
		},
	}
	for _, p := range parents {
		out.Categories = append(out.Categories, *byParent[p])
	}
	return out
}

// ErrorAnswer is newznab's error: a code and what it means.
type ErrorAnswer struct {
	XMLName     xml.Name `xml:"error" json:"-"`
	Code        int      `xml:"code,attr" json:"code"`
	Description string   `xml:"description,attr" json:"description"`
}

// The JSON forms (o=json), in the shape newznab indexers give: the RSS
// with each element's attributes under "@attributes".

type jsonAttrs[T any] struct {
	Attributes T `json:"@attributes"`
}

type jsonRSS struct {
	Attributes struct {
		Version string `json:"version"`
	} `json:"@attributes"`
	Channel jsonChannel `json:"channel"`
}

type jsonChannel struct {
	Title       string                `json:"title"`
	Description string                `json:"description"`
	Link        string                `json:"link"`
	Response    jsonAttrs[jsonOffset] `json:"response"`
	Item        []jsonItem            `json:"item"`
}

type jsonOffset struct {
	Offset string `json:"offset"`
	Total  string `json:"total"`
}

type jsonItem struct {
	Title       string                 `json:"title"`
	GUID        string                 `json:"guid"`
	Link        string                 `json:"link"`
	Comments    string                 `json:"comments"`
	PubDate     string                 `json:"pubDate"`
	Category    string                 `json:"category"`
	Description string                 `json:"description"`
	Enclosure   jsonAttrs[jsonEnclose] `json:"enclosure"`
	Attr        []jsonAttrs[Attr]      `json:"attr"`
}

type jsonEnclose struct {
	URL    string `json:"url"`
	Length string `json:"length"`
	Type   string `json:"type"`
}

// asJSON is the RSS in newznab's JSON shape.
func asJSON(r RSS) jsonRSS {
	var j jsonRSS
	j.Attributes.Version = r.Version
	j.Channel = jsonChannel{Title: r.Channel.Title, Description: r.Channel.Description, Link: r.Channel.Link, Item: []jsonItem{}}
	j.Channel.Response.Attributes = jsonOffset{strconv.Itoa(r.Channel.Response.Offset), strconv.Itoa(r.Channel.Response.Total)}
	for _, it := range r.Channel.Items {
		ji := jsonItem{Title: it.Title, GUID: it.GUID.URL, Link: it.Link, Comments: it.Comments, PubDate: it.PubDate,
			Category: it.Category, Description: it.Description,
			Enclosure: jsonAttrs[jsonEnclose]{jsonEnclose{it.Enclosure.URL, strconv.FormatInt(it.Enclosure.Length, 10), it.Enclosure.Type}}}
		for _, a := range it.Attrs {
			ji.Attr = append(ji.Attr, jsonAttrs[Attr]{a})
		}
		j.Channel.Item = append(j.Channel.Item, ji)
	}
	return j
}

// feedXML is xml.Marshal(feed), byte for byte, written without
// reflection: a page of 100 items is several ms of encoding/xml's time
// on a busy machine, more than the index takes to find them.
func feedXML(feed RSS) []byte {
	w := &xmlWriter{b: make([]byte, 0, 1024+len(feed.Channel.Items)*1536)}
	c := &feed.Channel
	w.open("rss", "version", feed.Version, "xmlns:atom", feed.Atom, "xmlns:newznab", feed.Newznab)
	w.raw("<channel>")
	w.open("atom:link", "href", c.AtomLink.Href, "rel", c.AtomLink.Rel, "type", c.AtomLink.Type)
	w.raw("</atom:link>")
	w.text("title", c.Title)
	w.text("description", c.Description)
	w.text("link", c.Link)
	w.text("language", c.Language)
	w.open("newznab:response", "offset", strconv.Itoa(c.Response.Offset), "total", strconv.Itoa(c.Response.Total))
	w.raw("</newznab:response>")
	for i := range c.Items {
		it := &c.Items[i]
		w.raw("<item>")
		w.text("title", it.Title)
		w.open("guid", "isPermaLink", strconv.FormatBool(it.GUID.IsPermaLink))
		w.escape(it.GUID.URL)
		w.raw("</guid>")
		w.text("link", it.Link)
		w.text("comments", it.Comments)
		w.text("pubDate", it.PubDate)
		w.text("category", it.Category)
		w.text("description", it.Description)
		w.open("enclosure", "url", it.Enclosure.URL, "length", strconv.FormatInt(it.Enclosure.Length, 10), "type", it.Enclosure.Type)
		w.raw("</enclosure>")
		for _, a := range it.Attrs {
			w.open("newznab:attr", "name", a.Name, "value", a.Value)
			w.raw("</newznab:attr>")
		}
		w.raw("</item>")
	}
	w.raw("</channel></rss>")
	return w.b
}

// xmlWriter appends XML as encoding/xml writes it: no indentation, every
// element closed by its end tag, text and attributes escaped as
// xml.EscapeText escapes.
type xmlWriter struct{ b []byte }

func (w *xmlWriter) raw(s string) { w.b = append(w.b, s...) }

// open writes a start tag with attributes given as name, value pairs.
func (w *xmlWriter) open(name string, attrs ...string) {
	w.b = append(w.b, '<')
	w.b = append(w.b, name...)
	for i := 0; i+1 < len(attrs); i += 2 {
		w.b = append(w.b, ' ')
		w.b = append(w.b, attrs[i]...)
		w.b = append(w.b, `="`...)
		w.escape(attrs[i+1])
		w.b = append(w.b, '"')
	}
	w.b = append(w.b, '>')
}

// text writes an element of text.
func (w *xmlWriter) text(name, s string) {
	w.open(name)
	w.escape(s)
	w.b = append(w.b, "</"...)
	w.b = append(w.b, name...)
	w.b = append(w.b, '>')
}

// escape writes s escaped as encoding/xml escapes text and attribute
// values: the five special characters and tab, line feed and carriage
// return as references, a rune XML has no place for (or a byte that is
// not UTF-8) as U+FFFD.
func (w *xmlWriter) escape(s string) {
	last := 0
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\'' && c != '&' && c != '<' && c != '>' {
			i++ // most of a feed: printable ASCII, as it is
			continue
		}
		r, width := utf8.DecodeRuneInString(s[i:])
		i += width
		var esc string
		switch r {
		case '"':
			esc = "&#34;"
		case '\'':
			esc = "&#39;"
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '\t':
			esc = "&#x9;"
		case '\n':
			esc = "&#xA;"
		case '\r':
			esc = "&#xD;"
		default:
			if !xmlChar(r) || (r == utf8.RuneError && width == 1) {
				esc = "\uFFFD"
				break
			}
			continue
		}
		w.b = append(w.b, s[last:i-width]...)
		w.b = append(w.b, esc...)
		last = i
	}
	w.b = append(w.b, s[last:]...)
}

// xmlChar is whether XML 1.0 has a place for r in a document.
func xmlChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
}
