package setting

import (
	"fmt"
	"strings"
)

// Markdown is the reference of groups, as docs/configuration.md shows
// it: a section per group, its introduction, and a table of its settings
// with their defaults, ranges and meanings.
func Markdown(groups []Group) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "## %s\n\n", g.Title)
		if g.Doc != "" {
			b.WriteString(strings.TrimSpace(g.Doc) + "\n\n")
		}
		b.WriteString("| setting | default | range | meaning |\n| --- | --- | --- | --- |\n")
		for _, s := range g.Settings {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Name, cell(s.Default), cell(s.Range), cell(s.Doc))
		}
	}
	return b.String()
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
