package chat

import (
	"strconv"
	"strings"
	"time"
)

// strftime formats t with the C/Python strftime directives templates use
// (%Y %m %d %e %H %M %S %y %b %B %a %A %j %p %I %%); others are written as is.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	pad := func(n int) { b.WriteString(leftPad(n)) }
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			pad(t.Year() % 100)
		case 'm':
			pad(int(t.Month()))
		case 'd':
			pad(t.Day())
		case 'e':
			if t.Day() < 10 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(t.Day()))
		case 'H':
			pad(t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			pad(h)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'M':
			pad(t.Minute())
		case 'S':
			pad(t.Second())
		case 'j':
			b.WriteString(leftPad3(t.YearDay()))
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// leftPad writes n with at least two digits.
func leftPad(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// leftPad3 writes n with at least three digits.
func leftPad3(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 3 {
		s = "0" + s
	}
	return s
}
