use tally::roman::{from_roman, to_roman};

#[test]
fn nine_hundred_is_cm() {
    assert_eq!(to_roman(900).as_deref(), Some("CM"));
    assert_eq!(to_roman(949).as_deref(), Some("CMXLIX"));
}

#[test]
fn year_1994() {
    assert_eq!(to_roman(1994).as_deref(), Some("MCMXCIV"));
    assert_eq!(to_roman(3999).as_deref(), Some("MMMCMXCIX"));
}

#[test]
fn reads_back_1994() {
    assert_eq!(from_roman("MCMXCIV"), Some(1994));
    assert_eq!(from_roman("CMXC"), Some(990));
}

#[test]
fn four_hundreds() {
    assert_eq!(to_roman(444).as_deref(), Some("CDXLIV"));
    assert_eq!(from_roman("CDXLIV"), Some(444));
}
