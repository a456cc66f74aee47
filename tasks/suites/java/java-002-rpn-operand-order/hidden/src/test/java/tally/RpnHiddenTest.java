package tally;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class RpnHiddenTest {
    @Test
    void subtractsInWrittenOrder() {
        assertEquals(5, Rpn.eval("7 2 -"));
        assertEquals(-7, Rpn.eval("2 9 -"));
    }

    @Test
    void nestedSubtraction() {
        assertEquals(11, Rpn.eval("10 2 3 - -"));
        assertEquals(21, Rpn.eval("4 6 * 3 -"));
    }

    @Test
    void dividesInWrittenOrder() {
        assertEquals(4, Rpn.eval("8 2 /"));
        assertEquals(3, Rpn.eval("7 2 /"));
    }

    @Test
    void divisionByZeroIsAnError() {
        RpnException zero = assertThrows(RpnException.class, () -> Rpn.eval("1 0 /"));
        assertEquals("division by zero", zero.getMessage());
        RpnException underflow = assertThrows(RpnException.class, () -> Rpn.eval("3 +"));
        assertEquals("stack underflow", underflow.getMessage());
    }
}
