#!/bin/sh
# help2man's include file for PROGRAM: the hand-written sections (docs/man/PROGRAM.h2m) and, for
# dtrun, a SUBCOMMANDS section from each subcommand's own --help (so the page never goes stale).
#   scripts/man-include.sh PROGRAM_PATH HAND_WRITTEN.h2m OUT.h2m
set -eu
program=$1 hand=$2 out=$3
cat "$hand" > "$out"
case "$(basename "$program")" in
  dtrun)
    printf '\n[SUBCOMMANDS]\n' >> "$out"
    for sub in status kill rdzv-server completion; do
      printf '.SS "dtrun %s"\n.nf\n' "$sub" >> "$out"
      # Roff reads a leading dot or backslash as markup.
      "$program" "$sub" --help | sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' >> "$out"
      printf '.fi\n' >> "$out"
    done
    ;;
esac
