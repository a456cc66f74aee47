package tally

import "strings"

var table = []struct {
	value  int
	symbol string
}{
	{1000, "M"}, {900, "CM"}, {500, "D"}, {400, "CD"}, {100, "C"}, {90, "XC"},
	{50, "L"}, {40, "XL"}, {10, "X"}, {9, "IX"}, {5, "V"}, {4, "IV"}, {1, "I"},
}

// ToRoman is the canonical Roman numeral of n, or "" outside 1..3999.
func ToRoman(n int) string {
	if n <= 0 || n > 3999 {
		return ""
	}
	var out strings.Builder
	for _, entry := range table {
		for n >= entry.value {
			out.WriteString(entry.symbol)
			n -= entry.value
		}
	}
	return out.String()
}

// FromRoman is the value of a canonical Roman numeral, or 0 if s is not one.
func FromRoman(s string) int {
	rest, total := s, 0
	for _, entry := range table {
		for strings.HasPrefix(rest, entry.symbol) {
			total += entry.value
			rest = rest[len(entry.symbol):]
		}
	}
	if rest != "" || ToRoman(total) != s {
		return 0
	}
	return total
}
