package tally;

import static org.junit.Assert.assertEquals;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.Test;

public class WrapHiddenTest {
    @Test
    public void lineOfExactWidth() {
        assertEquals(Arrays.asList("aaa bbb", "ccc"), Text.wrap("aaa bbb ccc", 7));
        assertEquals(Arrays.asList("one two", "three", "four"), Text.wrap("one two three four", 9));
    }

    @Test
    public void twoWordsFillingTheWidth() {
        assertEquals(Arrays.asList("ab cd"), Text.wrap("ab cd", 5));
        assertEquals(Arrays.asList("abc de", "fg"), Text.wrap("abc de fg", 6));
    }

    @Test
    public void longWordStandsAlone() {
        assertEquals(Arrays.asList("abcdefgh", "ij"), Text.wrap("abcdefgh ij", 4));
    }

    @Test
    public void emptyTextHasNoLines() {
        List<String> lines = new ArrayList<>(Text.wrap("", 5));
        lines.addAll(Text.wrap("   ", 3));
        lines.addAll(Text.wrap(" a b ", 4));
        assertEquals(Arrays.asList("a b"), lines);
    }
}
