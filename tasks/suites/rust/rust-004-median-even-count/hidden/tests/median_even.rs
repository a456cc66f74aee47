use tally::stats::median;

#[test]
fn median_of_four() {
    assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
    assert_eq!(median(&[10, 40, 20, 30]), Some(25.0));
}

#[test]
fn median_of_two() {
    assert_eq!(median(&[10, 20]), Some(15.0));
    assert_eq!(median(&[-3, 8]), Some(2.5));
}

#[test]
fn median_of_odd_count() {
    assert_eq!(median(&[7, 1, 5]), Some(5.0));
}

#[test]
fn median_of_nothing() {
    assert_eq!([median(&[]), median(&[6])], [None, Some(6.0)]);
}
