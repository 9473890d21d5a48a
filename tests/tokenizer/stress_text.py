"""
Writes a Unicode stress text for the tokenizer test to the file given as argument: tinyshakespeare
is pure ASCII, so this is what exercises multi-byte characters, the pre-tokenizer's letter, number
and whitespace classes, and GPT-2's case-sensitive contractions. Deterministic (fixed seed).
"""
import random
import sys
import unicodedata

HANDWRITTEN = [
    "Ünïcödé façade naïve café, ÆØÅ æøå ß ẞ İı ǅ ǈ",
    "Ελληνικά: Καλημέρα κόσμε! Русский: Съешь же ещё этих мягких французских булок.",
    "中文：你好，世界。日本語：こんにちは、世界！カタカナ ﾊﾝｶｸ 한국어: 안녕하세요 세계",
    "العربية: مرحبا بالعالم ١٢٣٤ עברית: שלום עולם हिन्दी: नमस्ते दुनिया ত্রিভুজ",
    "emoji 👋🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✈︎ 🏳️‍🌈 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
    "numbers: 42 3.14159 1,000,000 ２０２４ Ⅻ ⅷ ² ³ ½ ¾ ① ⑳ ０x１F",
    "contractions: it's IT'S we'll WE'LL they've THEY'VE I'm I'M you'd YOU'D we're WE'RE 'tis o'clock",
    "spaces:  two   three\tTab \t mixed\u00a0nbsp\u2003em\u3000ideo\u2009thin\u200bzwsp end   ",
    "controls: a\x0bb\x0cc\x1cd\x1de\x1ff\x85g\u2028h\u2029i\r\nj\rk\x00l\x7fm",
    "punctuation!!! ??? ... --- ___ *** ~~~ <|endoftext|> <tag attr=\"v\"> {json: [1, 2]} $%^&",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 क\u094d\u0937",
    "",
    "\n\n\n   \n\t\n",
]


def random_line(rng, pool, length):
    return "".join(rng.choice(pool) for _ in range(length))


def main():
    rng = random.Random(20240520)
    # random code points among those assigned by Unicode 3.2, whose categories every engine
    # (Python's tables, `regex`, V8) agrees on; the handwritten lines add newer emoji
    assigned = [c for c in range(0x20000)
                if unicodedata.ucd_3_2_0.category(chr(c)) not in ("Cn", "Cs", "Co")]
    pool = [chr(c) for c in rng.sample(assigned, 4000)]
    pool += list(" \t\n  'sltdmrev0123456789abcXYZ.,;!?") * 40  # keep words, spaces and contractions common
    lines = list(HANDWRITTEN)
    for i in range(700):
        lines.append(random_line(rng, pool, rng.randint(0, 80)))
        if rng.random() < 0.1:
            lines.append("")  # a blank line: a "\n\n" document break for the pipeline
    with open(sys.argv[1], "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
