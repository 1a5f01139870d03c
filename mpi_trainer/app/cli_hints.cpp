// Hints for a command line that does not parse (app/cli_hints.hpp).
#include "app/cli_hints.hpp"

#include <algorithm>
#include <numeric>

namespace mt::cli {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: Levenshtein with a swap of two neighbours as one edit.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 4) + 1;
  for (const auto& n : names) {
    const std::size_t dist = edit_distance(word, n);
    if (dist < best_d) {
      best_d = dist;
      best = n;
    }
  }
  if (!best.empty() || word.size() < 3) return best;
  std::vector<std::string> starts;
  std::copy_if(names.begin(), names.end(), std::back_inserter(starts),
               [&](const std::string& n) { return n.rfind(word, 0) == 0; });
  return starts.size() == 1 ? starts.front() : std::string();
}

namespace {

std::vector<CLI::App*> commands(CLI::App& app) {
  return app.get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); });
}

std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* c : commands(app))
    out.push_back(c->get_name());
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  return std::accumulate(names.begin(), names.end(), std::string(),
                         [](const std::string& a, const std::string& b) { return a.empty() ? b : a + ", " + b; });
}

// The command (and sub-command) the words name, the index of the first word after them; a word
// that names none: *unknown, with the level it was looked for at.
CLI::App* chosen(CLI::App& app, int argc, char** argv, int* next, std::string* unknown, CLI::App** level) {
  CLI::App* at = &app;
  int i = 1;
  while (i < argc) {
    const std::string w = argv[i];
    if (w.empty() || w[0] == '-') break;
    CLI::App* sub = nullptr;
    for (CLI::App* c : commands(*at))
      if (c->get_name() == w) sub = c;
    if (!sub) {
      if (commands(*at).empty()) break;  // a positional argument of the command
      *unknown = w;
      *level = at;
      break;
    }
    at = sub;
    ++i;
  }
  *next = i;
  return at;
}

}  // namespace

std::string usage_hints(CLI::App& app, int argc, char** argv) {
  std::string out;
  int next = 1;
  std::string unknown;
  CLI::App* level = nullptr;
  CLI::App* cmd = chosen(app, argc, argv, &next, &unknown, &level);
  const std::string where = level && level != &app ? "'" + level->get_name() + "' command" : "command";
  if (!unknown.empty()) {
    const std::string near = closest_name(unknown, command_names(*level));
    out += "unknown " + where + " '" + unknown + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
           "; the commands: " + joined(command_names(*level)) + '\n';
    return out;
  }
  if (!commands(*cmd).empty() && cmd->get_require_subcommand_min() > 0 && (next >= argc || argv[next][0] == '-') &&
      !cmd->get_subcommands().size())
    out += std::string(cmd == &app ? "a command is needed" : "'" + cmd->get_name() + "' needs a command") +
           ": one of " + joined(command_names(*cmd)) + '\n';
  std::vector<std::string> flags;
  for (const CLI::App* a : {static_cast<const CLI::App*>(cmd), static_cast<const CLI::App*>(&app)})
    for (const CLI::Option* o : a->get_options())
      for (const auto& l : o->get_lnames())
        flags.push_back("--" + l);
  for (int i = next; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--") break;
    if (w.rfind("--", 0) != 0 || w.size() < 3) continue;
    const std::string name = w.substr(0, w.find('='));
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
    const std::string near = closest_name(name, flags);
    out += "unknown flag " + name + (cmd == &app ? "" : " of '" + cmd->get_name() + "'") +
           (near.empty() ? "" : ": did you mean " + near + "?") + '\n';
  }
  return out;
}

}  // namespace mt::cli
