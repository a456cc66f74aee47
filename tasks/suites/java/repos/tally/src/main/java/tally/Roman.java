package tally;

/** Roman numerals for 1..3999, in canonical subtractive form. */
public final class Roman {
    private static final int[] VALUES = {1000, 900, 500, 400, 100, 90, 50, 40, 10, 9, 5, 4, 1};
    private static final String[] SYMBOLS = {
        "M", "CM", "D", "CD", "C", "XC", "L", "XL", "X", "IX", "V", "IV", "I"
    };

    private Roman() {}

    /** The canonical numeral of {@code n}, or "" outside 1..3999. */
    public static String toRoman(int n) {
        if (n <= 0 || n > 3999) {
            return "";
        }
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < VALUES.length; i++) {
            while (n >= VALUES[i]) {
                out.append(SYMBOLS[i]);
                n -= VALUES[i];
            }
        }
        return out.toString();
    }

    /** The value of a canonical numeral, or 0 if {@code s} is not one. */
    public static int fromRoman(String s) {
        String rest = s;
        int total = 0;
        for (int i = 0; i < VALUES.length; i++) {
            while (rest.startsWith(SYMBOLS[i])) {
                total += VALUES[i];
                rest = rest.substring(SYMBOLS[i].length());
            }
        }
        if (!rest.isEmpty() || !toRoman(total).equals(s)) {
            return 0;
        }
        return total;
    }
}
