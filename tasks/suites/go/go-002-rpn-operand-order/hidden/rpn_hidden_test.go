package tally

import "testing"

func TestSubtractsInWrittenOrder(t *testing.T) {
	if got := Eval("7 2 -"); got != (Result{Value: 5}) {
		t.Errorf("Eval = %+v", got)
	}
	if got := Eval("2 9 -"); got != (Result{Value: -7}) {
		t.Errorf("Eval = %+v", got)
	}
}

func TestNestedSubtraction(t *testing.T) {
	if got := Eval("10 2 3 - -"); got != (Result{Value: 11}) {
		t.Errorf("Eval = %+v", got)
	}
	if got := Eval("4 6 * 3 -"); got != (Result{Value: 21}) {
		t.Errorf("Eval = %+v", got)
	}
}

func TestDividesInWrittenOrder(t *testing.T) {
	if got := Eval("8 2 /"); got != (Result{Value: 4}) {
		t.Errorf("Eval = %+v", got)
	}
	if got := Eval("7 2 /"); got != (Result{Value: 3}) {
		t.Errorf("Eval = %+v", got)
	}
}

func TestDivisionByZeroIsAnError(t *testing.T) {
	if got := Eval("1 0 /"); got != (Result{Err: "division by zero"}) {
		t.Errorf("Eval = %+v", got)
	}
	if got := Eval("3 +"); got != (Result{Err: "stack underflow"}) {
		t.Errorf("Eval = %+v", got)
	}
}
