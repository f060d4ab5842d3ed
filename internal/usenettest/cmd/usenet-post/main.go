// Command usenet-post makes groups PREFIX.a and PREFIX.b in the INN that
// scripts/inn.sh started and posts leasehold's fixed article set into
// them, --files more generated multi-part files into PREFIX.a (speed
// runs), and with --mix DIR a realistic mix of yEnc posts (writing the
// files a downloader must rebuild into DIR). scripts/inn.sh post runs it.
package main

import (
	"context"
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
