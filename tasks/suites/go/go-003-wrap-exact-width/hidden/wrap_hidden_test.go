package tally

import (
	"reflect"
	"testing"
)

func TestLineOfExactWidth(t *testing.T) {
	if got := Wrap("aaa bbb ccc", 7); !reflect.DeepEqual(got, []string{"aaa bbb", "ccc"}) {
		t.Errorf("Wrap = %q", got)
	}
	if got := Wrap("one two three four", 9); !reflect.DeepEqual(got, []string{"one two", "three", "four"}) {
		t.Errorf("Wrap = %q", got)
	}
}

func TestTwoWordsFillingTheWidth(t *testing.T) {
	if got := Wrap("ab cd", 5); !reflect.DeepEqual(got, []string{"ab cd"}) {
		t.Errorf("Wrap = %q", got)
	}
	if got := Wrap("abc de fg", 6); !reflect.DeepEqual(got, []string{"abc de", "fg"}) {
		t.Errorf("Wrap = %q", got)
	}
}

func TestLongWordStandsAlone(t *testing.T) {
	if got := Wrap("abcdefgh ij", 4); !reflect.DeepEqual(got, []string{"abcdefgh", "ij"}) {
		t.Errorf("Wrap = %q", got)
	}
}

func TestEmptyTextHasNoLines(t *testing.T) {
	if got := append(append(Wrap("", 5), Wrap("   ", 3)...), Wrap(" a b ", 4)...); !reflect.DeepEqual(got, []string{"a b"}) {
		t.Errorf("lines = %q", got)
	}
}
