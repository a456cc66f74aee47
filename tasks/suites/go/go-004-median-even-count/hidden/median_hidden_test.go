package tally

import (
	"fmt"
	"testing"
)

func TestMedianOfFour(t *testing.T) {
	if got := MedianOr([]int{4, 1, 3, 2}, -1); got != 2.5 {
		t.Errorf("Median = %v", got)
	}
	if got := MedianOr([]int{10, 40, 20, 30}, -1); got != 25 {
		t.Errorf("Median = %v", got)
	}
}

func TestMedianOfTwo(t *testing.T) {
	if got := MedianOr([]int{10, 20}, -1); got != 15 {
		t.Errorf("Median = %v", got)
	}
	if got := MedianOr([]int{-3, 8}, -1); got != 2.5 {
		t.Errorf("Median = %v", got)
	}
}

func TestMedianOfOdd(t *testing.T) {
	if got := MedianOr([]int{7, 1, 5}, -1); got != 5 {
		t.Errorf("Median = %v", got)
	}
}

func TestMedianOfNothing(t *testing.T) {
	if got := fmt.Sprint(Median(nil)) + " / " + fmt.Sprint(Median([]int{6})); got != "0 false / 6 true" {
		t.Errorf("Median(nil); Median(6) = %v", got)
	}
	if got := MedianOr(nil, 42.5); got != 42.5 {
		t.Errorf("MedianOr(nil, 42.5) = %v", got)
	}
}
