use tally::rpn::{eval, RpnError};

#[test]
fn subtracts_in_written_order() {
    assert_eq!(eval("7 2 -"), Ok(5));
    assert_eq!(eval("2 9 -"), Ok(-7));
}

#[test]
fn nested_subtraction() {
    assert_eq!(eval("10 2 3 - -"), Ok(11));
    assert_eq!(eval("4 6 * 3 -"), Ok(21));
}

#[test]
fn divides_in_written_order() {
    assert_eq!(eval("8 2 /"), Ok(4));
    assert_eq!(eval("7 2 /"), Ok(3));
}

#[test]
fn division_by_zero_is_an_error() {
    assert_eq!(eval("1 0 /"), Err(RpnError::DivisionByZero));
    assert_eq!(eval("3 +"), Err(RpnError::StackUnderflow));
}
