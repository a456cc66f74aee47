package tally;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;

class BasicsTest {
    @Test
    void romanSmallNumbers() {
        assertEquals("IV", Roman.toRoman(4));
    }

    @Test
    void rpnAdds() {
        assertEquals(5, Rpn.eval("2 3 +"));
    }

    @Test
    void wrapsShortText() {
        assertEquals(List.of("a b"), Text.wrap("a b", 10));
    }

    @Test
    void medianOfOddCount() {
        assertEquals(3.0, Stats.medianOr(-1, 5, 1, 3));
    }
}
