#include "app/learning_check.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>

namespace mt {

std::string learned_nothing_warning(double test_accuracy, double test_loss, int classes, const TrainConfig& c,
                                    int workers) {
  if (!std::isfinite(test_accuracy) || classes < 2 || test_accuracy >= 1.5 / classes) return {};
  char head[200];
  std::snprintf(head, sizeof head,
                "test accuracy %.1f%% is chance level for %d classes (%.0f%%; test loss %.3f, ln %d = %.3f): "
                "the network learned nothing. ",
                100.0 * test_accuracy, classes, 100.0 / classes, test_loss, classes, std::log(double(classes)));
  std::string causes = "Likely causes: ";
  if (workers > 1)
    causes += "a learning rate too large for " + std::to_string(workers) +
              " asynchronous workers at the start (the loss jumps in the first progress lines and then sits at "
              "ln classes: lower --lr or lengthen --lr-warmup-steps); ";
  else
    causes += "a learning rate too large (lower --lr); ";
  causes += "too few steps (--train-steps " + std::to_string(c.train_steps) +
            "); labels that do not match the images (check --data)";
  return head + causes;
}

void add_warnings(nlohmann::ordered_json& summary, const std::string& warning) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  if (!warning.empty()) {
    list.push_back(warning);
    std::cerr << "mpi_trainer: warning: " << warning << '\n' << std::flush;
  }
  summary["warnings"] = list;
}

}  // namespace mt
