package tally

import "testing"

func TestNineHundredIsCM(t *testing.T) {
	if got := ToRoman(900); got != "CM" {
		t.Errorf("ToRoman(900) = %q", got)
	}
	if got := ToRoman(949); got != "CMXLIX" {
		t.Errorf("ToRoman(949) = %q", got)
	}
}

func TestYear1994(t *testing.T) {
	if got := ToRoman(1994); got != "MCMXCIV" {
		t.Errorf("ToRoman(1994) = %q", got)
	}
	if got := ToRoman(3999); got != "MMMCMXCIX" {
		t.Errorf("ToRoman(3999) = %q", got)
	}
}

func TestReadsBack1994(t *testing.T) {
	if got := FromRoman("MCMXCIV"); got != 1994 {
		t.Errorf("FromRoman = %d", got)
	}
	if got := FromRoman("CMXC"); got != 990 {
		t.Errorf("FromRoman = %d", got)
	}
}

func TestFourHundreds(t *testing.T) {
	if got := ToRoman(444); got != "CDXLIV" {
		t.Errorf("ToRoman(444) = %q", got)
	}
	if got := FromRoman("CDXLIV"); got != 444 {
		t.Errorf("FromRoman = %d", got)
	}
}
