"""Check that every relative link (and #anchor) of README.md and docs/*.md resolves.

    python docs/check_links.py [REPO_ROOT]      # exit status 1 if a link is broken

Anchors are computed as GitHub computes them from the headings."""
import re, sys, os, unicodedata
from pathlib import Path
root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
def slug(h):
    h = h.strip().lower()
    out = []
    for ch in h:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN":
            out.append(ch)
    return "".join(out).replace(" ", "-")
def anchors(p):
    res, seen, code = set(), {}, False
    for line in p.read_text().splitlines():
        if line.startswith("```"): code = not code; continue
        if code: continue
        m = re.match(r"^(#{1,6})\s+(.*)", line)
        if m:
            s = slug(m.group(2)); n = seen.get(s, 0); seen[s] = n + 1
            res.add(s if n == 0 else f"{s}-{n}")
    return res
bad = 0; n = 0
for f in files:
    text = f.read_text()
    code = False; lines = []
    for line in text.splitlines():
        if line.startswith("```"): code = not code; continue
        if not code: lines.append(line)
    body = "\n".join(lines)
    body = re.sub(r"`[^`]*`", "", body)
    for m in re.finditer(r"\]\(([^)\s]+)\)", body):
        target = m.group(1)
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"): continue
        n += 1
        path, _, frag = target.partition("#")
        tp = (f.parent / path).resolve() if path else f
        if not tp.exists():
            print(f"MISSING {f.relative_to(root)}: {target}"); bad += 1; continue
        if frag and tp.suffix == ".md" and frag not in anchors(tp):
            print(f"BAD ANCHOR {f.relative_to(root)}: {target}"); bad += 1
print(f"{n} relative links checked, {bad} broken")
sys.exit(1 if bad else 0)
