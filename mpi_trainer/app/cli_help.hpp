// --help as a reader wants it (app/cli.cpp): a command's options in sections, in the order a user
// needs them (the basics first), every description wrapped to the terminal's width.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <vector>

namespace mt::cli {

// The width help is wrapped to: stdout's terminal (TIOCGWINSZ), else $COLUMNS, else 100; never
// under 60 or over 200.
std::size_t help_width();

// `text`'s words refilled into lines of at most `width` characters (a longer word broken after a
// comma or a slash, else at the width), its own line breaks kept.
std::string wrap_words(const std::string& text, std::size_t width);

class HelpFormatter : public CLI::Formatter {
 public:
  // `sections`: the option groups in the order they are printed; any other group follows them.
  HelpFormatter(std::vector<std::string> sections, std::size_t width);
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;
  std::string make_footer(const CLI::App* app) const override;

 private:
  std::string entry(const std::string& name, const std::string& desc) const;  // one option or subcommand
  std::vector<std::string> sections_;
  std::size_t width_;
};

// The sections of `train` (and `join`), in --help's order.
const std::vector<std::string>& train_sections();
// Puts each of train's options into its section (add_train_options calls it last); throws
// std::logic_error naming an option that has none (a flag added without a section: tests catch it).
void assign_train_sections(CLI::App& cmd);

}  // namespace mt::cli
