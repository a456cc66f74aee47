package tally

import (
	"reflect"
	"testing"
)

func TestRomanSmallNumbers(t *testing.T) {
	if got := ToRoman(4); got != "IV" {
		t.Errorf("ToRoman(4) = %q", got)
	}
}

func TestRPNAdds(t *testing.T) {
	if got := Eval("2 3 +"); got != (Result{Value: 5}) {
		t.Errorf("Eval = %+v", got)
	}
}

func TestWrapShortText(t *testing.T) {
	if got := Wrap("a b", 10); !reflect.DeepEqual(got, []string{"a b"}) {
		t.Errorf("Wrap = %q", got)
	}
}

func TestMedianOfOddCount(t *testing.T) {
	if got := MedianOr([]int{5, 1, 3}, -1); got != 3 {
		t.Errorf("Median = %v", got)
	}
}
