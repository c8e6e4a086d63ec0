"""dtplot as a library: the readers of metrics and TensorBoard files take hostile bytes without
exiting the process, and input it cannot draw from is an exception, not sys.exit."""

import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import dtplot  # noqa: E402


class ReadMetricsTest(unittest.TestCase):
    def test_bad_and_overlong_lines_are_skipped(self):
        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as f:
            f.write(b'{"kind": "train", "epoch": 0, "loss": 1.5}\n')
            f.write(b"not json\n")
            f.write(b"[1, 2]\n")  # JSON, but not an object
            f.write(b'{"kind": "val", "x": "' + b"a" * (dtplot.MAX_LINE_BYTES + 1) + b'"}\n')
            f.write(b'{"kind": "val", "epoch": 0, "top1": 50}\n')
        try:
            records = dtplot.read_metrics(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual([r["kind"] for r in records], ["train", "val"])


class ProtobufFieldsTest(unittest.TestCase):
    def test_truncated_and_unknown_wire_types_raise_value_error(self):
        for bad in (b"\x0a\x05ab", b"\x0f", b"\x09\x01\x02", b"\x80" * 11):
            with self.assertRaises(ValueError, msg=repr(bad)):
                list(dtplot._fields(bad))
        self.assertEqual(list(dtplot._fields(b"\x08\x96\x01")), [(1, 0, 150)])
        self.assertEqual(list(dtplot._fields(b"\x15" + struct.pack("<f", 1.5))), [(2, 5, struct.pack("<f", 1.5))])


class SchemaTest(unittest.TestCase):
    """Every name dtplot reads is one the trainers write (worker/metrics_schema.json)."""

    def test_every_name_read_is_in_the_trainers_schema(self):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "worker", "metrics_schema.json")) as f:
            schema = json.load(f)
        read = [(kind, key) for _, _, lines in dtplot.PANELS for kind, key, _, _ in lines]
        read += [("train", key) for key in dtplot.POSITION_FIELDS + tuple(dtplot.RATE_FIELDS) + dtplot.IO_FIELDS]
        read += [("val", key) for key in ("epoch", "global_step")]
        for kind, key in read:
            self.assertIn(key, schema[kind], f"dtplot reads {kind}.{key}, which the trainers do not write")


class RunTest(unittest.TestCase):
    def test_a_directory_without_metrics_is_an_error_not_an_exit(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(dtplot.DtplotError) as caught:
                dtplot.Run(d, "empty")
            self.assertIn("no metrics.jsonl", str(caught.exception))

    def test_main_reports_the_error_in_one_line_and_returns_2(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(dtplot.main([os.path.join(d, "missing")]), 2)


if __name__ == "__main__":
    unittest.main()
