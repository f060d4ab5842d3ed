// Command usenet-post makes groups PREFIX.a and PREFIX.b in the INN that
// scripts/inn.sh started and posts leasehold's fixed article set into
// them, --files more generated multi-part files into PREFIX.a (speed
// runs), and with --mix DIR a realistic mix of yEnc posts (writing the
// files a downloader must rebuild into DIR). scripts/inn.sh post runs it.
//
// With --shapes DIR it posts only the corpus of today's posting tools'
// shapes (usenettest.Shapes, --fillers plain articles between the two
// halves of the release posted in two halves) into PREFIX.a and
// PREFIX.b, and writes each release's files into DIR/NN/ and the
// releases as posted into DIR/releases.json: scripts/inn.sh shapes runs
// it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

func main() {
	prefix := flag.String("prefix", "", "group name prefix (groups PREFIX.a and PREFIX.b)")
	files := flag.Int("files", 0, "generated files to post into PREFIX.a after the fixed set")
	parts := flag.Int("parts", 20, "parts of each generated file")
	mix := flag.String("mix", "", "post the realistic yEnc mix too, and write its complete files into this directory")
	shapes := flag.String("shapes", "", "post only the corpus of posting tools' shapes, writing its releases into this directory")
	fillers := flag.Int("fillers", 300, "with --shapes: plain articles between the two halves of the release posted in two halves")
	flag.Parse()
	if *prefix == "" {
		fmt.Fprintln(os.Stderr, "usage: usenet-post --prefix P [--files N] [--parts M]")
		os.Exit(2)
	}
	s, err := usenettest.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "usenet-post:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if *shapes != "" {
		if err := postShapes(ctx, s, *prefix, *shapes, *fillers); err != nil {
			fmt.Fprintln(os.Stderr, "usenet-post:", err)
			os.Exit(1)
		}
		return
	}
	if err := s.NewGroups(ctx, *prefix+".a", *prefix+".b"); err != nil {
		fmt.Fprintln(os.Stderr, "usenet-post:", err)
		os.Exit(1)
	}
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer c.Close()
	arts := usenettest.Fixed(*prefix)
	arts = append(arts, usenettest.Generated(*prefix+".a", *files, *parts)...)
	if *mix != "" {
		posts, complete := usenettest.Mix(*prefix, 1)
		arts = append(arts, posts...)
		if err := os.MkdirAll(*mix, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "usenet-post:", err)
			os.Exit(1)
		}
		for _, f := range complete {
			if err := os.WriteFile(filepath.Join(*mix, f.Name), f.Data, 0o600); err != nil {
				fmt.Fprintln(os.Stderr, "usenet-post:", err)
				os.Exit(1)
			}
		}
	}
	start := time.Now()
	if err := usenettest.Post(ctx, c, arts); err != nil {
		fmt.Fprintln(os.Stderr, "usenet-post:", err)
		os.Exit(1)
	}
	fmt.Printf("usenet-post: %d articles into %s.a and %s.b in %.1fs\n", len(arts), *prefix, *prefix, time.Since(start).Seconds())
}

// postedRelease is a release of the shapes corpus as releases.json
// lists it: Dir holds its files.
type postedRelease struct {
	Shape    string   `json:"shape"`
	Name     string   `json:"name"`
	Poster   string   `json:"poster"`
	Groups   []string `json:"groups"`
	Files    []string `json:"files"`
	Complete bool     `json:"complete"`
	Dir      string   `json:"dir"`
}

func postShapes(ctx context.Context, s *usenettest.Server, prefix, dir string, fillers int) error {
	c := usenettest.Shapes(prefix, fillers, 1)
	var list []postedRelease
	for i, r := range c.Releases {
		sub := fmt.Sprintf("%02d", i+1)
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
		p := postedRelease{Shape: r.Shape, Name: r.Name, Poster: r.Poster, Groups: r.Groups, Complete: r.Complete, Dir: sub}
		for _, f := range r.Files {
			p.Files = append(p.Files, f.Name)
			if err := os.WriteFile(filepath.Join(dir, sub, f.Name), f.Data, 0o600); err != nil {
				return err
			}
		}
		list = append(list, p)
	}
	b, err := json.MarshalIndent(list, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "releases.json"), b, 0o600); err != nil {
		return err
	}
	start := time.Now()
	if err := c.Post(ctx, s, 4); err != nil {
		return err
	}
	fmt.Printf("usenet-post: %d releases in %d articles and %d fillers into %s and %s in %.1fs\n",
		len(c.Releases), len(c.Before)+len(c.After), len(c.Fillers), c.A, c.B, time.Since(start).Seconds())
	return nil
}
