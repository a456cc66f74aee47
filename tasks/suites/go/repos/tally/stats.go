package tally

import "sort"

// Median is the middle value of values; ok is false when there are none.
func Median(values []int) (median float64, ok bool) {
	if len(values) == 0 {
		return 0, false
	}
	sorted := append([]int(nil), values...)
	sort.Ints(sorted)
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return float64(sorted[mid-1]+sorted[mid]) / 2, true
	}
	return float64(sorted[mid]), true
}

// MedianOr is the median of values, or fallback when there are none.
func MedianOr(values []int, fallback float64) float64 {
	if m, ok := Median(values); ok {
		return m
	}
	return fallback
}
