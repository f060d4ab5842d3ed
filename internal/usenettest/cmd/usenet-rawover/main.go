// Command usenet-rawover reads a group's overview the plainest way, the
// yardstick of scripts/bench-usenet.sh: one connection, MODE READER,
// GROUP, then OVER of --batch article numbers at a time, each answer read
// to its end before the next is asked, lines counted and not parsed, no
// compression. It prints the headers a second.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", os.Getenv("LEASEHOLD_TEST_NNTP"), "the news server, host:port (default $LEASEHOLD_TEST_NNTP)")
	group := flag.String("group", "", "the group to read")
	batch := flag.Int64("batch", 1000, "article numbers an OVER asks for")
	marks := flag.Bool("marks", false, "print the group's low and high marks and read nothing")
	flag.Parse()
	if *addr == "" || *group == "" || *batch < 1 {
		fmt.Fprintln(os.Stderr, "usage: usenet-rawover --group G [--addr host:port] [--batch N]")
		os.Exit(2)
	}
	if err := read(*addr, *group, *batch, *marks); err != nil {
		fmt.Fprintln(os.Stderr, "usenet-rawover:", err)
		os.Exit(1)
	}
}

func read(addr, group string, batch int64, marks bool) error {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	line := func() (string, error) {
		nc.SetReadDeadline(time.Now().Add(60 * time.Second))
		s, err := r.ReadString('\n')
		return strings.TrimRight(s, "\r\n"), err
	}
	ask := func(cmd string) (string, error) {
		if _, err := fmt.Fprintf(nc, "%s\r\n", cmd); err != nil {
			return "", err
		}
		return line()
	}
	if _, err := line(); err != nil {
		return err
	}
	if _, err := ask("MODE READER"); err != nil {
		return err
	}
	start := time.Now()
	st, err := ask("GROUP " + group)
	if err != nil {
		return err
	}
	var count, low, high int64
	if _, err := fmt.Sscanf(st, "211 %d %d %d", &count, &low, &high); err != nil {
		return fmt.Errorf("GROUP %s: %q", group, st)
	}
	if marks {
		fmt.Println(low, high)
		return nil
	}
	var headers int64
	for lo := low; lo <= high; lo += batch {
		st, err := ask(fmt.Sprintf("OVER %d-%d", lo, min(high, lo+batch-1)))
		if err != nil {
			return err
		}
		if !strings.HasPrefix(st, "224") {
			continue
		}
		for {
			l, err := line()
			if err != nil {
				return err
			}
			if l == "." {
				break
			}
			headers++
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("raw single-connection OVER: %d headers in %.2f s: %.0f headers/s\n", headers, secs, float64(headers)/secs)
	return nil
}
