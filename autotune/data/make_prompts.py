"""Generate the built-in prompt set, ``prompts.jsonl``, from templates and topic lists.

Run ``python -m autotune.data.make_prompts`` to rewrite the file; the output is deterministic
(seeded), so the committed file can be checked against it. The mix is chat (single- and
multi-turn, some with long pasted passages), code and math, with prompt lengths from a few words
to about two thousand, and a natural output length (``max_tokens``) per prompt that fits the task.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20240917
OUT = Path(__file__).with_name("prompts.jsonl")

TOPICS = [
    "photosynthesis", "the French Revolution", "black holes", "compound interest", "vaccines",
    "plate tectonics", "the stock market", "climate feedback loops", "the immune system",
    "quantum entanglement", "the printing press", "supply and demand", "neural networks",
    "the water cycle", "inflation", "the Roman Empire", "DNA replication", "jet engines",
    "the Silk Road", "renewable energy", "sleep", "coral reefs", "the Internet", "democracy",
    "antibiotic resistance", "the Cold War", "volcanoes", "blockchains", "bird migration",
    "the theory of evolution", "nuclear fusion", "the Renaissance", "urban planning",
    "public key cryptography", "the human microbiome", "ocean currents", "game theory",
    "the history of jazz", "3D printing", "exoplanets", "language acquisition in children",
    "the Industrial Revolution", "electric cars", "memory and forgetting", "tides",
    "the Great Depression", "honeybees", "GPS", "the placebo effect", "glaciers",
]
AUDIENCES = ["a ten-year-old", "a high-school student", "a busy executive", "a retired engineer",
             "someone who has never heard of it", "a graduate student", "a skeptical friend"]
FORMS = ["a short poem", "a limerick", "a haiku sequence", "a two-paragraph story",
         "a persuasive paragraph", "a product description", "a diary entry", "a news brief"]
CHAT_TEMPLATES = [
    "Explain {topic} to {audience}.",
    "What are the three most common misconceptions about {topic}?",
    "Write {form} about {topic}.",
    "Give me a one-sentence summary of {topic}.",
    "How would you teach {topic} in a 45-minute class? Outline the lesson plan.",
    "List five surprising facts about {topic}, each with a short explanation.",
    "Compare {topic} and {other}. Where do they overlap and where do they differ?",
    "I have an exam on {topic} tomorrow. What should I focus on, and how should I study "
    "tonight if I only have three hours?",
    "Write a friendly email to a colleague explaining why {topic} matters for our team.",
    "What questions would a curious person ask about {topic}? Answer the top two.",
]
ADVICE = [
    "I keep procrastinating on a big project at work. The deadline is in two weeks and I have "
    "barely started. What concrete steps can I take this week?",
    "How do I politely decline a wedding invitation from a close friend?",
    "I want to start running but I get bored quickly. Any ideas?",
    "What is a good way to organise a small home library of about 500 books?",
    "My team argues a lot in meetings. How can I make meetings calmer and more productive?",
    "How should I prepare for a job interview for a data analyst role?",
    "Suggest a three-day itinerary for a first visit to a large city, with a mix of museums, "
    "food and walking.",
    "How can I get better at remembering people's names?",
    "I'm moving to a new country next month. What should I do in my first week there?",
    "What should I consider when adopting a dog while living in a small apartment?",
    "Recommend a weekly meal-prep plan for a vegetarian on a tight budget.",
    "How do I give constructive feedback to someone more senior than me?",
]

LANGS = ["Python", "JavaScript", "Rust", "Go", "C++", "Java", "TypeScript", "C"]
CODE_TASKS = [
    "returns the n-th Fibonacci number using memoisation",
    "checks whether a string is a palindrome, ignoring punctuation and case",
    "merges two sorted lists into one sorted list",
    "parses a CSV line that may contain quoted fields with commas",
    "computes the longest common subsequence of two strings",
    "implements a least-recently-used cache with a fixed capacity",
    "finds all prime numbers below n with the sieve of Eratosthenes",
    "flattens an arbitrarily nested list",
    "validates an IPv4 address given as a string",
    "performs a binary search and returns the insertion point",
    "counts word frequencies in a text and returns the top k words",
    "detects a cycle in a directed graph given as an adjacency list",
    "converts a Roman numeral to an integer",
    "rotates an n by n matrix by 90 degrees in place",
    "implements a thread-safe bounded queue",
    "computes the edit distance between two strings",
    "serialises a binary tree to a string and back",
    "finds the k closest points to the origin",
    "implements exponential backoff with jitter for retrying a function",
    "tokenises a simple arithmetic expression and evaluates it",
]
CODE_TEMPLATES = [
    "Write a {lang} function that {task}. Include a docstring and two test cases.",
    "In {lang}, write code that {task}. Explain its time and space complexity.",
    "Implement a function in {lang} that {task}. Handle edge cases carefully.",
]
SNIPPET_FUNCS = ["process", "update_totals", "parse_record", "merge_items", "score",
                 "normalise", "collect", "dispatch"]
SNIPPET_VARS = ["items", "records", "values", "rows", "entries", "nodes", "events", "scores"]
CODE_REVIEW = [
    "What does the following {lang} code do? Explain it line by line.\n\n{code}",
    "Find the bug in this code and propose a fix.\n\n{code}",
    "Refactor this code to be more readable and idiomatic. Keep the behaviour identical.\n\n"
    "{code}",
    "Write unit tests for the following function.\n\n{code}",
    "This code is slow on large inputs. Why, and how would you speed it up?\n\n{code}",
]

MATH_WORD = [
    "A train leaves a station at {a} km/h. Another train leaves the same station {b} minutes "
    "later at {c} km/h on the same track. How long after the first train left does the second "
    "catch up? Show your reasoning step by step.",
    "A shop sells pencils at {a} cents each and notebooks at {c} cents each. Maria buys {b} "
    "items and pays {d} cents. How many notebooks did she buy? Explain.",
    "The sum of three consecutive integers is {e}. What are the integers? Show your work.",
    "A rectangle has a perimeter of {e} cm and its length is {a} cm more than its width. Find "
    "its area.",
    "If you invest {d} dollars at {a} percent annual interest compounded yearly, how much will "
    "you have after {b} years? Give the formula and the number.",
    "A bag holds {a} red, {b} blue and {c} green marbles. Two are drawn without replacement. "
    "What is the probability that both are the same colour?",
    "Solve for x: {a}x + {b} = {c}x - {d}.",
    "Find all real solutions of x^2 - {e}x + {f} = 0.",
    "What is the derivative of f(x) = {a}x^3 - {b}x^2 + {c}x - {d}? Where is f increasing?",
    "Compute the integral of {a}x^2 + {b}x from 0 to {c}.",
    "How many ways can a committee of {b} people be chosen from {e} candidates? And if two "
    "particular candidates refuse to serve together?",
    "A car's value drops by {a} percent each year. After how many years is it worth less than "
    "half its original price?",
]
MATH_PROOF = [
    "Prove that the square root of {p} is irrational.",
    "Prove by induction that 1 + 2 + ... + n = n(n+1)/2.",
    "Prove that there are infinitely many primes.",
    "Show that the product of any {q} consecutive integers is divisible by {q}.",
    "Prove that for every integer n, n^{q} - n is divisible by {q} when {q} is prime.",
    "Prove that a graph with n vertices and more than n - 1 edges contains a cycle.",
    "Show that every bounded monotone sequence of real numbers converges.",
    "Prove that the sum of the interior angles of a convex polygon with n sides is "
    "(n - 2) * 180 degrees.",
]

WORDS = ("the system was designed to balance cost and reliability while the team studied how "
         "users behaved under load and what changed when the network was slow or the data grew "
         "beyond what anyone expected at the start of the project although several early "
         "measurements suggested that caching helped more than tuning the database and that "
         "most errors came from a small number of inputs which were then handled explicitly "
         "by a new validation step reviewed by two engineers before every release").split()


def _passage(rng: random.Random, words: int, topic: str) -> str:
    paras = []
    remaining = words
    while remaining > 0:
        n = min(remaining, rng.randint(60, 140))
        body = " ".join(rng.choice(WORDS) for _ in range(n))
        paras.append(f"In the context of {topic}, {body}.")
        remaining -= n
    return "\n\n".join(paras)


def _snippet(rng: random.Random, lines: int) -> str:
    fn = rng.choice(SNIPPET_FUNCS)
    var = rng.choice(SNIPPET_VARS)
    out = [f"def {fn}({var}, limit={rng.randint(2, 99)}):", "    result = []",
           "    total = 0"]
    for i in range(max(1, lines - 6)):
        k = rng.randint(1, 9)
        op = rng.choice(["+", "-", "*", "//"])
        cond = rng.choice([f"x % {k} == 0", f"x > {k * 3}", f"len(result) < {k + 2}",
                           f"total {op} x < limit"])
        out.append(f"    for x in {var}[{i}::{k}]:" if i % 4 == 0 else f"        if {cond}:")
        out.append(f"            total = total {op} x" if i % 4 else "        result.append(x)")
    out += ["    if total > limit:", "        return result[:limit]", "    return result"]
    return "\n".join(out)


def build(seed: int = SEED) -> list[dict]:
    """The whole prompt set, as JSON-ready dicts."""
    rng = random.Random(seed)
    rows: list[dict] = []

    def add(category: str, max_tokens: int, *, prompt: str | None = None,
            messages: list[dict] | None = None) -> None:
        row: dict = {"id": f"{category}-{len([r for r in rows if r['category'] == category]):03d}",
                     "category": category}
        if prompt is not None:
            row["prompt"] = prompt
        else:
            row["messages"] = messages
        row["max_tokens"] = max_tokens
        rows.append(row)

    for i in range(110):
        topic = TOPICS[i % len(TOPICS)]
        other = rng.choice([t for t in TOPICS if t != topic])
        tmpl = CHAT_TEMPLATES[(i * 7 + i // len(TOPICS)) % len(CHAT_TEMPLATES)]
        text = tmpl.format(topic=topic, other=other, audience=rng.choice(AUDIENCES),
                           form=rng.choice(FORMS))
        add("chat", rng.choice([96, 128, 192, 256, 384, 512]), prompt=text)
    for text in ADVICE:
        add("chat", rng.choice([192, 256, 384]), prompt=text)
    for _ in range(40):
        topic = rng.choice(TOPICS)
        words = rng.choice([150, 300, 500, 800, 1200, 1800])
        ask = rng.choice(["Summarise the following notes in five bullet points.",
                          "Read the passage below and list its main claims.",
                          "Write a short abstract for the following text.",
                          "What questions does this text leave unanswered?"])
        add("chat", rng.choice([128, 192, 256]),
            prompt=f"{ask}\n\n{_passage(rng, words, topic)}")
    for _ in range(40):
        topic = rng.choice(TOPICS)
        first = rng.choice(CHAT_TEMPLATES).format(topic=topic, other=rng.choice(TOPICS),
                                                  audience=rng.choice(AUDIENCES),
                                                  form=rng.choice(FORMS))
        reply = _passage(rng, rng.choice([40, 80, 160, 300]), topic)
        follow = rng.choice(["Can you make that shorter?", "Give me a concrete example.",
                             "How does that relate to everyday life?",
                             "What would an expert disagree with in your answer?",
                             "Turn that into a table with two columns."])
        add("chat", rng.choice([128, 256, 384]),
            messages=[{"role": "system", "content": "You are a concise, helpful assistant."},
                      {"role": "user", "content": first},
                      {"role": "assistant", "content": reply},
                      {"role": "user", "content": follow}])

    for lang in LANGS:
        for j, task in enumerate(CODE_TASKS):
            if (j + LANGS.index(lang)) % 2:
                continue
            tmpl = CODE_TEMPLATES[(j + len(lang)) % len(CODE_TEMPLATES)]
            add("code", rng.choice([256, 384, 512, 768, 1024]),
                prompt=tmpl.format(lang=lang, task=task))
    for i in range(50):
        code = _snippet(rng, rng.choice([8, 14, 24, 40, 70, 110]))
        tmpl = CODE_REVIEW[i % len(CODE_REVIEW)]
        add("code", rng.choice([256, 384, 512, 768]),
            prompt=tmpl.format(lang="Python", code=f"```python\n{code}\n```"))

    for i in range(96):
        a, b, c = rng.randint(2, 90), rng.randint(2, 12), rng.randint(3, 120)
        d, e, f = rng.randint(50, 5000), rng.randint(6, 300), rng.randint(1, 400)
        tmpl = MATH_WORD[i % len(MATH_WORD)]
        add("math", rng.choice([128, 256, 384, 512, 768]),
            prompt=tmpl.format(a=a, b=b, c=c, d=d, e=e, f=f))
    for i in range(24):
        tmpl = MATH_PROOF[i % len(MATH_PROOF)]
        add("math", rng.choice([384, 512, 768, 1024]),
            prompt=tmpl.format(p=rng.choice([2, 3, 5, 6, 7, 10, 11, 13]),
                               q=rng.choice([2, 3, 5, 7])))

    # Drop exact duplicates a template might produce, keeping the first.
    seen: set[str] = set()
    unique = []
    for row in rows:
        key = json.dumps(row.get("prompt") or row.get("messages"))
        if key not in seen:
            seen.add(key)
            unique.append(row)
    rng.shuffle(unique)
    return unique


def main() -> None:
    """Rewrite ``prompts.jsonl`` next to this file."""
    rows = build()
    with OUT.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
