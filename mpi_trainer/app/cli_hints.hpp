// What a command line that does not parse most likely meant (app/cli.cpp): a mistyped flag or
// command named with the closest one ("did you mean --train-steps?"), an unknown or missing
// command with the list of them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace mt::cli {

// The edit distance (insertions, deletions, substitutions, transpositions of neighbours).
std::size_t edit_distance(const std::string& a, const std::string& b);
// The name of `names` closest to `word`, if it is close enough to be what was meant (within a
// quarter of its length, at least 2 edits; or `word` is the start of exactly one name); else "".
std::string closest_name(const std::string& word, const std::vector<std::string>& names);
// Lines to add to a parse error's message (each ending in '\n'; "" when there is nothing to say):
// the unknown command or flags of `argv`, each with the closest known one, against `app`'s
// commands and the chosen command's flags.
std::string usage_hints(CLI::App& app, int argc, char** argv);

}  // namespace mt::cli
