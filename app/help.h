// --help's layout: the flags grouped by topic, one line each (the full
// descriptions are in docs/flags.md). Kept apart from cli.cpp, which adds
// the flags, so that grouping them is one table and one call there.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace ddpbench {

// The topic a flag is listed under in --help ("" when the table lacks it:
// such a flag is listed under "Other").
std::string HelpGroup(const std::string& flag);

// Puts every option of `app` in its topic and installs the formatter that
// prints the topics in order, one line per flag.
void GroupHelp(CLI::App& app);

}  // namespace ddpbench
