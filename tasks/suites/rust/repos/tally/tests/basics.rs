use tally::{roman, rpn, stats, text};

#[test]
fn roman_small_numbers() {
    assert_eq!(roman::to_roman(3).as_deref(), Some("III"));
    assert_eq!(roman::to_roman(4).as_deref(), Some("IV"));
}

#[test]
fn roman_out_of_range() {
    assert_eq!(roman::to_roman(0), None);
    assert_eq!(roman::to_roman(4000), None);
}

#[test]
fn rpn_adds() {
    assert_eq!(rpn::eval("2 3 +"), Ok(5));
}

#[test]
fn wrap_short_text_is_one_line() {
    assert_eq!(text::wrap("a b", 10), vec!["a b".to_string()]);
}

#[test]
fn mean_of_values() {
    assert_eq!(stats::mean(&[1, 2, 3]), Some(2.0));
}

#[test]
fn median_of_odd_count() {
    assert_eq!(stats::median(&[5, 1, 3]), Some(3.0));
}
