package simulate

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// checkPicture checks that a picture of rows policies decodes, has the
// expected size, and shows allowed and refused requests in their colours.
func checkPicture(t *testing.T, format string, data []byte, rows int) {
	t.Helper()
	switch format {
	case PNG:
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("png: %v", err)
		}
		wantW := int(float64(picWidth/vg.Inch) * pngDPI)
		wantH := int(float64((titleH+rowHeight*vg.Length(rows))/vg.Inch) * pngDPI)
		b := img.Bounds()
		if abs(b.Dx()-wantW) > 1 || abs(b.Dy()-wantH) > 1 {
			t.Errorf("png is %dx%d, want %dx%d", b.Dx(), b.Dy(), wantW, wantH)
		}
		if n := countColour(img, fillAllowed); n < 50 {
			t.Errorf("png: %d pixels of the allowed colour", n)
		}
		if n := countColour(img, fillRefused); n < 50 {
			t.Errorf("png: %d pixels of the refused colour", n)
		}
	case SVG:
		dec := xml.NewDecoder(bytes.NewReader(data))
		paths, texts := 0, ""
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("svg: %v", err)
			}
			switch x := tok.(type) {
			case xml.StartElement:
				if x.Name.Local == "path" {
					paths++
				}
			case xml.CharData:
				texts += string(x)
			}
		}
		if paths < 20*rows {
			t.Errorf("svg: %d paths for %d rows", paths, rows)
		}
		for _, want := range []string{"allowed", "refused", "remaining", "admitted", "nominal"} {
			if !strings.Contains(texts, want) {
				t.Errorf("svg has no text %q", want)
			}
		}
	}
}

func countColour(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
				n++
			}
		}
	}
	return n
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
