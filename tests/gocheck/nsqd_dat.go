// Reads an nsqd.dat the way Go nsqd v1.3.0 does at start-up and prints what it would restore.
//
// nsqd decodes the file with encoding/json into its metadata structs (a topic's name, paused
// flag and channels; a channel's name and paused flag; the version) and skips topics and
// channels whose names fail its name check. The structs below have those fields and JSON tags
// and nothing else, so any extra field nsqpy writes meets the same fate as in nsqd: ignored.
//
// Usage: go run nsqd_dat.go /path/to/nsqd.dat
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
)

type channelMeta struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}

type topicMeta struct {
	Name     string        `json:"name"`
	Paused   bool          `json:"paused"`
	Channels []channelMeta `json:"channels"`
}

type metadata struct {
	Topics  []topicMeta `json:"topics"`
	Version string      `json:"version"`
}

var nameRule = regexp.MustCompile(`^[.a-zA-Z0-9_-]+(#ephemeral)?$`)

func validName(name string) bool {
	return len(name) >= 1 && len(name) <= 64 && nameRule.MatchString(name)
}

type restored struct {
	Version string      `json:"version"`
	Topics  []topicMeta `json:"topics"`
	Skipped []string    `json:"skipped"`
}

func main() {
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var m metadata
	if err := json.Unmarshal(data, &m); err != nil {
		fmt.Fprintf(os.Stderr, "failed to parse metadata - %s\n", err)
		os.Exit(1)
	}
	out := restored{Version: m.Version, Topics: []topicMeta{}, Skipped: []string{}}
	for _, t := range m.Topics {
		if !validName(t.Name) {
			out.Skipped = append(out.Skipped, t.Name)
			continue
		}
		kept := topicMeta{Name: t.Name, Paused: t.Paused, Channels: []channelMeta{}}
		for _, c := range t.Channels {
			if !validName(c.Name) {
				out.Skipped = append(out.Skipped, t.Name+":"+c.Name)
				continue
			}
			kept.Channels = append(kept.Channels, c)
		}
		out.Topics = append(out.Topics, kept)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
