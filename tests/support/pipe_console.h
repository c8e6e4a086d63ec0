// A console (agent/console.h) that writes into a pipe, for tests of what reaches dtrun's console:
// write through `console`, then Take() everything written.
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "agent/console.h"
#include "base/console_writer.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"

namespace dtrun::testing {

struct PipeConsole {
  PipeConsole()
      : pipe(*MakePipe(false)),
        writer(std::make_shared<ConsoleWriter>(pipe.write.get())),
        console(std::make_shared<Console>(writer)) {}
  // Everything written (read while it is written: more than a pipe holds may be waiting); the
  // console is closed after it.
  std::string Take() {
    if (console) console->Flush();
    std::string out;
    std::thread reader([&] {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(pipe.read.get(), buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    });
    EXPECT_TRUE(writer->WaitWritten(-1, std::chrono::seconds(10)));
    writer.reset();
    console.reset();
    pipe.write.Reset();
    reader.join();
    return out;
  }
  Pipe pipe;
  std::shared_ptr<ConsoleWriter> writer;
  std::shared_ptr<Console> console;
};

}  // namespace dtrun::testing
