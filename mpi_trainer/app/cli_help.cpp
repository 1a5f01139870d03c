// --help in sections, wrapped to the terminal (app/cli_help.hpp).
#include "app/cli_help.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace mt::cli {

std::size_t help_width() {
  std::size_t w = 0;
  winsize ws{};
  if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) w = ws.ws_col;
  if (w == 0)
    if (const char* c = std::getenv("COLUMNS")) w = static_cast<std::size_t>(std::strtoul(c, nullptr, 10));
  if (w == 0) w = 100;
  return std::clamp<std::size_t>(w, 60, 200);
}

std::string wrap_words(const std::string& text, std::size_t width) {
  std::string out;
  std::istringstream paragraphs(text);
  std::string paragraph;
  bool first_paragraph = true;
  while (std::getline(paragraphs, paragraph)) {
    if (!first_paragraph) out += '\n';
    first_paragraph = false;
    std::istringstream split(paragraph);
    std::vector<std::string> words;
    for (std::string w; split >> w;) {
      // A word wider than the line (a list without spaces) breaks after a comma or a slash, else
      // where the line ends.
      while (w.size() > width) {
        const std::size_t cut = w.find_last_of(",/", width - 1);
        const std::size_t n = cut == std::string::npos || cut == 0 ? width : cut + 1;
        words.push_back(w.substr(0, n));
        w.erase(0, n);
      }
      words.push_back(w);
    }
    std::string line;
    for (const std::string& word : words) {
      if (!line.empty() && line.size() + 1 + word.size() > width) {
        out += line + '\n';
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
    }
    out += line;
  }
  return out;
}

HelpFormatter::HelpFormatter(std::vector<std::string> sections, std::size_t width)
    : sections_(std::move(sections)), width_(width) {
  column_width(std::min<std::size_t>(36, width / 3));
}

namespace {

// `text` refilled to `width`, every line after the first indented by `indent` spaces.
std::string hanging(const std::string& text, std::size_t width, std::size_t indent) {
  const std::string filled = wrap_words(text, width > indent + 20 ? width - indent : 20);
  std::string out;
  for (const char c : filled) {
    out += c;
    if (c == '\n') out.append(indent, ' ');
  }
  return out;
}

}  // namespace

// CLI11 puts the name, type, default and environment variable (a subcommand's name) in a column
// and the description beside it on one endless line; here both are wrapped: the head on its own
// line(s) when it is wider than the column, the description filled to the width, indented by the
// column.
std::string HelpFormatter::entry(const std::string& name, const std::string& desc) const {
  const std::size_t col = get_column_width();
  const std::string head = "  " + hanging(name, width_ - 2, 6);
  if (desc.empty()) return head + "\n";
  std::string out = head;
  if (head.find('\n') == std::string::npos && head.size() + 1 < col)
    out.append(col - head.size(), ' ');
  else
    out += "\n" + std::string(col, ' ');
  return out + hanging(desc, width_, col) + "\n";
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  return entry(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  return entry(sub->get_display_name(true), sub->get_description());
}

// CLI11's own texts (each ends with a newline when not empty), refilled.
std::string HelpFormatter::make_description(const CLI::App* app) const {
  const std::string d = CLI::Formatter::make_description(app);
  return d.empty() ? d : wrap_words(d, width_) + "\n";
}

std::string HelpFormatter::make_footer(const CLI::App* app) const {
  const std::string f = CLI::Formatter::make_footer(app);
  return f.empty() ? f : wrap_words(f, width_) + "\n";
}

namespace {
std::size_t layout_rank(const std::string& name);
std::string long_name(const CLI::Option* o);
}  // namespace

// CLI11's own, but the option groups in the sections' order (CLI11 prints them in the order of
// their first option), and train's options in its layout's order within each.
std::string HelpFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const {
  if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
  std::vector<std::string> groups = app->get_groups();
  std::stable_sort(groups.begin(), groups.end(), [this](const std::string& a, const std::string& b) {
    const auto rank = [this](const std::string& g) {
      return static_cast<std::size_t>(std::find(sections_.begin(), sections_.end(), g) - sections_.begin());
    };
    return rank(a) < rank(b);
  });
  std::ostringstream out;
  out << make_description(app) << make_usage(app, name) << make_positionals(app);
  for (const std::string& group : groups) {  // (each group starts with its blank line)
    std::vector<const CLI::Option*> opts = app->get_options([&group](const CLI::Option* o) {
      return o->get_group() == group && o->nonpositional();
    });
    std::stable_sort(opts.begin(), opts.end(), [](const CLI::Option* a, const CLI::Option* b) {
      return layout_rank(long_name(a)) < layout_rank(long_name(b));
    });
    if (!group.empty() && !opts.empty()) out << make_group(group, false, opts);
  }
  out << make_subcommands(app, mode) << '\n' << make_footer(app);
  return out.str();
}

namespace {

// train's flags in --help's order, each with its section.
const std::vector<std::pair<std::string, std::string>>& train_layout() {
  static const std::vector<std::pair<std::string, std::string>> l{
      {"help", "Basics"}, {"model", "Basics"}, {"train-steps", "Basics"}, {"batch-size", "Basics"},
      {"device", "Basics"}, {"threads", "Basics"}, {"seed", "Basics"}, {"quiet", "Basics"},
      {"data", "Data"}, {"augment", "Data"}, {"normalize", "Data"},
      {"lr-schedule", "Optimizer"}, {"lr", "Optimizer"}, {"lr-warmup-steps", "Optimizer"},
      {"momentum", "Optimizer"}, {"weight-decay", "Optimizer"}, {"nesterov", "Optimizer"},
      {"max-loss", "Optimizer"},
      {"metrics", "Outputs"}, {"tensorboard", "Outputs"}, {"log-every-steps", "Outputs"},
      {"eval-every-steps", "Outputs"}, {"push-log", "Outputs"},
      {"ckpt-dir", "Checkpoints"}, {"ckpt-every-steps", "Checkpoints"}, {"ckpt-every-seconds", "Checkpoints"},
      {"ckpt-keep", "Checkpoints"}, {"ckpt-sync", "Checkpoints"}, {"ckpt-fail", "Checkpoints"},
      {"resume", "Checkpoints"}, {"resume-override", "Checkpoints"}, {"status-file", "Checkpoints"},
      {"num-ps", "Parameter server"}, {"momentum-correction", "Parameter server"},
      {"lr-scaling", "Parameter server"}, {"push-precision", "Parameter server"},
      {"max-staleness", "Parameter server"}, {"join-warmup", "Parameter server"},
      {"spike-guard", "Parameter server"}, {"push-norm-limit", "Parameter server"},
      {"max-rejected-pushes", "Parameter server"},
      {"failure-timeout", "Fault tolerance"}, {"ps-standby", "Fault tolerance"},
      {"replica-interval", "Fault tolerance"}, {"replica-budget", "Fault tolerance"},
      {"push-journal", "Fault tolerance"}, {"ps-handover", "Fault tolerance"}, {"replace-workers", "Fault tolerance"},
      {"drain-deadline", "Fault tolerance"}, {"revoke", "Fault tolerance"},
      {"revocation-model", "Fault tolerance"}, {"time-scale", "Fault tolerance"},
      {"corrupt-push", "Fault tolerance"},
      {"max-workers", "Elastic joins"}, {"port-file", "Elastic joins"}, {"join-secret", "Elastic joins"},
      {"emulate-device", "Emulated devices and virtual runs"}, {"emulate-scale", "Emulated devices and virtual runs"},
      {"virtual-workers", "Emulated devices and virtual runs"}, {"worker-links", "Emulated devices and virtual runs"},
      {"ps-link", "Emulated devices and virtual runs"}, {"virtual-joins", "Emulated devices and virtual runs"},
      {"ps-update-seconds", "Emulated devices and virtual runs"},
      {"instance-type", "Cost"}, {"worker-types", "Cost"}, {"ps-type", "Cost"}, {"pricing", "Cost"},
      {"ps-pricing", "Cost"}, {"prices", "Cost"}};
  return l;
}

std::string long_name(const CLI::Option* o) { return o->get_lnames().empty() ? o->get_name() : o->get_lnames().front(); }

// An option's place in train's layout (other commands' options: after, in their own order).
std::size_t layout_rank(const std::string& name) {
  const auto& l = train_layout();
  return static_cast<std::size_t>(
      std::find_if(l.begin(), l.end(), [&name](const auto& e) { return e.first == name; }) - l.begin());
}

}  // namespace

const std::vector<std::string>& train_sections() {
  static const std::vector<std::string> s{"Basics",          "Data",           "Optimizer",
                                          "Outputs",         "Checkpoints",    "Parameter server",
                                          "Fault tolerance", "Elastic joins",  "Emulated devices and virtual runs",
                                          "Cost"};
  return s;
}

void assign_train_sections(CLI::App& cmd) {
  std::map<std::string, std::string> section;
  for (const auto& [name, group] : train_layout()) section[name] = group;
  for (CLI::Option* o : cmd.get_options()) {
    if (o->get_group().empty()) continue;  // hidden (--synthetic-gradients)
    const auto it = section.find(long_name(o));
    if (it == section.end()) throw std::logic_error("train option --" + long_name(o) + " has no --help section");
    o->group(it->second);
  }
}

}  // namespace mt::cli
