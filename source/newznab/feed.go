package newznab

import (
	"encoding/xml"
	"net/url"
	"slices"
	"strconv"
	"time"

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
