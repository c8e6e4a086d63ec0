"""Unit tests of dtrun._warm without an agent: the release message the agent writes down the park
pipe (the same bytes base/park_message.cc's EncodeRelease makes), and every way it can be broken.

    PYTHONPATH=build/lib/dtrun/python python3 tests/python/warm_test.py
"""
import os
import threading
import unittest

from dtrun import _warm


def release(data, close=True):
    """The read end of a pipe holding `data` (written by a thread: it may exceed the pipe buffer)."""
    r, w = os.pipe()

    def write():
        for i in range(0, len(data), 4096):
            os.write(w, data[i:i + 4096])
        if close:
            os.close(w)

    threading.Thread(target=write, daemon=True).start()
    return r


def encode(entries):
    payload = b"".join(e + b"\0" for e in entries)
    return b"%d\n" % len(payload) + payload


class ReadReleaseTest(unittest.TestCase):
    def test_the_rounds_environment_comes_back_whole(self):
        entries = [b"RANK=3", b"MASTER_ADDR=10.0.0.1", b"EMPTY=", b"EQ=a=b", b"BIG=" + b"x" * 200000]
        env = _warm.read_release(release(encode(entries)))
        self.assertEqual(env["RANK"], "3")
        self.assertEqual(env["EMPTY"], "")
        self.assertEqual(env["EQ"], "a=b")
        self.assertEqual(len(env["BIG"]), 200000)
        self.assertEqual(len(env), 5)

    def test_an_empty_environment_is_allowed(self):
        self.assertEqual(_warm.read_release(release(b"0\n")), {})

    def test_a_size_that_is_not_a_bounded_decimal_is_refused(self):
        for header in [b"\n", b"-1\n", b"12x\n", b"%d\n" % (_warm.MAX_RELEASE_BYTES + 1), b"1" * 40]:
            with self.subTest(header=header), self.assertRaisesRegex(_warm.ReleaseError, "must start with its size"):
                _warm.read_release(release(header))

    def test_entries_that_are_not_name_value_or_an_unended_payload_are_refused(self):
        with self.assertRaisesRegex(_warm.ReleaseError, "entry 1 is not NAME=value"):
            _warm.read_release(release(encode([b"A=1", b"no-equals"])))
        with self.assertRaisesRegex(_warm.ReleaseError, "entry 0 is not NAME=value"):
            _warm.read_release(release(encode([b"=value"])))
        with self.assertRaisesRegex(_warm.ReleaseError, "end with a NUL"):
            _warm.read_release(release(b"3\nA=1"))

    def test_a_pipe_closed_before_or_during_the_release_says_which(self):
        with self.assertRaisesRegex(_warm.ReleaseError, "before releasing"):
            _warm.read_release(release(b""))
        with self.assertRaisesRegex(_warm.ReleaseError, "in the middle of a release"):
            _warm.read_release(release(b"100\nA=1\0"))


if __name__ == "__main__":
    unittest.main()
