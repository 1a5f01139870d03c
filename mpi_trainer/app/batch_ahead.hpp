// The next training batch, fetched from the loader and staged on the network ahead of its step,
// so that a device uploads it while the previous step computes (Network::stage_images). Both
// trainers call advance() from train_step's while_running hook. The loader then runs one batch
// ahead of training, so a step's checkpoint or push must carry the cursor of the batch it
// trained (current().cursor), not the loader's.
#pragma once

#include <cstdint>
#include <span>

#include "data/loader.hpp"
#include "nn/resnet.hpp"

namespace mt {

class BatchAhead {
 public:
  BatchAhead(BatchLoader& loader, Network& net) : loader_(loader), net_(net) {}

  // Fetches and stages the next batch.
  void advance() {
    batch_ = &loader_.next();
    current_ = {net_.stage_images(batch_->images), batch_->labels, loader_.cursor()};
  }

  struct Staged {
    Network::StagedImages images;
    // The loader's memory: train_step reads it before its while_running hook runs advance().
    std::span<const std::int32_t> labels;
    LoaderCursor cursor;  // the loader's position after this batch
  };
  // The batch advance() staged last, by value: the advance() inside its step replaces it here.
  Staged current() const { return current_; }

 private:
  BatchLoader& loader_;
  Network& net_;
  const Batch* batch_ = nullptr;
  Staged current_;
};

}  // namespace mt
