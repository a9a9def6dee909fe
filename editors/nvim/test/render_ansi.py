"""Renders a terminal capture (tmux capture-pane -e -p) to a PNG.

Understands the SGR sequences tmux emits: 16/256/true colours for foreground and background,
bold, italic, underline, reverse and resets. Every cell is one monospace character wide.

usage: render_ansi.py CAPTURE.txt OUT.png [FONT.ttf]
"""

import re
import sys

from PIL import Image, ImageDraw, ImageFont

DEFAULT_FG = (224, 226, 234)
DEFAULT_BG = (20, 22, 27)
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
FONT_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
SIZE = 15

BASE16 = [
    (0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16),
    (36, 114, 200), (188, 63, 188), (17, 168, 205), (229, 229, 229),
    (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
    (59, 142, 234), (214, 112, 214), (41, 184, 219), (255, 255, 255),
]


def xterm256(n):
    if n < 16:
        return BASE16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return (v, v, v)


class Style:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = None
        self.bg = None
        self.bold = False
        self.italic = False
        self.underline = False
        self.reverse = False

    def copy(self):
        s = Style()
        s.__dict__.update(self.__dict__)
        return s

    def apply(self, params):
        ps = [int(p) if p else 0 for p in params.split(";")] if params else [0]
        i = 0
        while i < len(ps):
            p = ps[i]
            if p == 0:
                self.reset()
            elif p == 1:
                self.bold = True
            elif p == 3:
                self.italic = True
            elif p in (4, 21):
                self.underline = True
            elif p == 7:
                self.reverse = True
            elif p == 22:
                self.bold = False
            elif p == 23:
                self.italic = False
            elif p == 24:
                self.underline = False
            elif p == 27:
                self.reverse = False
            elif 30 <= p <= 37:
                self.fg = BASE16[p - 30]
            elif 90 <= p <= 97:
                self.fg = BASE16[p - 90 + 8]
            elif 40 <= p <= 47:
                self.bg = BASE16[p - 40]
            elif 100 <= p <= 107:
                self.bg = BASE16[p - 100 + 8]
            elif p == 39:
                self.fg = None
            elif p == 49:
                self.bg = None
            elif p in (38, 48, 58):
                color = None
                if i + 1 < len(ps) and ps[i + 1] == 5 and i + 2 < len(ps):
                    color = xterm256(ps[i + 2])
                    i += 2
                elif i + 1 < len(ps) and ps[i + 1] == 2 and i + 4 < len(ps):
                    color = (ps[i + 2], ps[i + 3], ps[i + 4])
                    i += 4
                if p == 38:
                    self.fg = color
                elif p == 48:
                    self.bg = color
            i += 1


SGR = re.compile(r"\x1b\[([0-9;]*)m|\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b.")


def parse(text, width):
    rows = []
    style = Style()
    for line in text.split("\n"):
        cells = []
        pos = 0
        for m in SGR.finditer(line):
            for ch in line[pos:m.start()]:
                cells.append((ch, style.copy()))
            if m.group(0).endswith("m") and m.group(0).startswith("\x1b["):
                style.apply(m.group(1))
            pos = m.end()
        for ch in line[pos:]:
            cells.append((ch, style.copy()))
        rows.append(cells[:width])
    return rows


def main():
    src, out = sys.argv[1], sys.argv[2]
    font_path = sys.argv[3] if len(sys.argv) > 3 else FONT
    text = open(src, encoding="utf-8", errors="replace").read().rstrip("\n")
    width = int(sys.argv[4]) if len(sys.argv) > 4 else max(
        (len(SGR.sub("", ln)) for ln in text.split("\n")), default=80
    )
    rows = parse(text, width)
    font = ImageFont.truetype(font_path, SIZE)
    try:
        bold = ImageFont.truetype(FONT_BOLD, SIZE)
    except OSError:
        bold = font
    cw = round(font.getlength("M"))
    asc, desc = font.getmetrics()
    ch = asc + desc + 2
    pad = 12
    img = Image.new("RGB", (width * cw + 2 * pad, len(rows) * ch + 2 * pad), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for y, cells in enumerate(rows):
        for x in range(width):
            c, s = cells[x] if x < len(cells) else (" ", Style())
            fg = s.fg or DEFAULT_FG
            bg = s.bg or DEFAULT_BG
            if s.reverse:
                fg, bg = bg, fg
            px, py = pad + x * cw, pad + y * ch
            if bg != DEFAULT_BG:
                draw.rectangle([px, py, px + cw - 1, py + ch - 1], fill=bg)
            if c.strip():
                draw.text((px, py + 1), c, font=bold if s.bold else font, fill=fg)
            if s.underline:
                draw.line([px, py + ch - 2, px + cw - 1, py + ch - 2], fill=fg)
    img.save(out)


if __name__ == "__main__":
    main()
