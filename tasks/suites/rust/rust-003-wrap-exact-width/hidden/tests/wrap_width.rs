use tally::text::wrap;

#[test]
fn line_of_exact_width() {
    assert_eq!(wrap("aaa bbb ccc", 7), vec!["aaa bbb", "ccc"]);
    assert_eq!(wrap("one two three four", 9), vec!["one two", "three", "four"]);
}

#[test]
fn two_words_filling_the_width() {
    assert_eq!(wrap("ab cd", 5), vec!["ab cd"]);
    assert_eq!(wrap("abc de fg", 6), vec!["abc de", "fg"]);
}

#[test]
fn long_word_stands_alone() {
    assert_eq!(wrap("abcdefgh ij", 4), vec!["abcdefgh", "ij"]);
}

#[test]
fn empty_text_has_no_lines() {
    assert_eq!([wrap("", 5), wrap("   ", 3), wrap(" a b ", 4)].concat(), vec!["a b"]);
}
