//! Roman numerals for 1..=3999.

const TABLE: [(u32, &str); 13] = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
];

/// The canonical Roman numeral of `n`, or None outside 1..=3999.
pub fn to_roman(n: u32) -> Option<String> {
    if n == 0 || n > 3999 {
        return None;
    }
    let mut left = n;
    let mut out = String::new();
    for (value, symbol) in TABLE.iter() {
        while left >= *value {
            out.push_str(symbol);
            left -= value;
        }
    }
    Some(out)
}

/// The value of a canonical Roman numeral, or None if `s` is not one.
pub fn from_roman(s: &str) -> Option<u32> {
    let mut rest = s;
    let mut total = 0;
    for (value, symbol) in TABLE.iter() {
        while rest.starts_with(symbol) {
            total += value;
            rest = &rest[symbol.len()..];
        }
    }
    if rest.is_empty() && to_roman(total).as_deref() == Some(s) {
        Some(total)
    } else {
        None
    }
}
