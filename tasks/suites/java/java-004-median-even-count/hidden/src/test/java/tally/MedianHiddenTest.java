package tally;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import java.util.OptionalDouble;
import org.junit.jupiter.api.Test;

class MedianHiddenTest {
    @Test
    void medianOfFour() {
        assertEquals(2.5, Stats.medianOr(-1, 4, 1, 3, 2));
        assertEquals(25.0, Stats.medianOr(-1, 10, 40, 20, 30));
        assertEquals(OptionalDouble.of(2.5), Stats.median(1, 2, 3, 4));
    }

    @Test
    void medianOfTwo() {
        assertEquals(15.0, Stats.medianOr(-1, 10, 20));
        assertEquals(2.5, Stats.medianOr(-1, -3, 8));
    }

    @Test
    void medianOfOdd() {
        assertEquals(5.0, Stats.medianOr(-1, 7, 1, 5));
    }

    @Test
    void medianOfNothing() {
        assertEquals(
            Arrays.asList(OptionalDouble.empty(), OptionalDouble.of(6)), Arrays.asList(Stats.median(), Stats.median(6)));
        assertEquals(-7.5, Stats.medianOr(-7.5));
    }
}
