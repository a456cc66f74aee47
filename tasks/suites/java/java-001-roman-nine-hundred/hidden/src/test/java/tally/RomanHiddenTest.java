package tally;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class RomanHiddenTest {
    @Test
    void nineHundredIsCM() {
        assertEquals("CM", Roman.toRoman(900));
        assertEquals("CMXLIX", Roman.toRoman(949));
    }

    @Test
    void year1994() {
        assertEquals("MCMXCIV", Roman.toRoman(1994));
        assertEquals("MMMCMXCIX", Roman.toRoman(3999));
    }

    @Test
    void readsBack1994() {
        assertEquals(1994, Roman.fromRoman("MCMXCIV"));
        assertEquals(990, Roman.fromRoman("CMXC"));
    }

    @Test
    void fourHundreds() {
        assertEquals("CDXLIV", Roman.toRoman(444));
        assertEquals(444, Roman.fromRoman("CDXLIV"));
    }
}
