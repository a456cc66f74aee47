package tally

import (
	"strings"
	"unicode/utf8"
)

// Wrap splits text into lines of at most width characters, breaking between words; a longer word stands
// on a line of its own.
func Wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		needed := utf8.RuneCountInString(word)
		if line != "" {
			needed += utf8.RuneCountInString(line) + 1
		}
		if needed <= width || line == "" {
			if line != "" {
				line += " "
			}
			line += word
		} else {
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
