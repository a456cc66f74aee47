package tally;

import java.util.Arrays;
import java.util.OptionalDouble;

/** Summary statistics. */
public final class Stats {
    private Stats() {}

    /** The middle value of {@code values}; empty when there are none. */
    public static OptionalDouble median(int... values) {
        if (values.length == 0) {
            return OptionalDouble.empty();
        }
        int[] sorted = values.clone();
        Arrays.sort(sorted);
        int mid = sorted.length / 2;
        if (sorted.length % 2 == 0) {
            return OptionalDouble.of((sorted[mid - 1] + sorted[mid]) / 2.0);
        }
        return OptionalDouble.of(sorted[mid]);
    }

    /** The median of {@code values}, or {@code fallback} when there are none. */
    public static double medianOr(double fallback, int... values) {
        return median(values).orElse(fallback);
    }
}
