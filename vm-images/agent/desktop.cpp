#include "vm-images/agent/desktop.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "vnc/encode.h"
#include "vnc/scale.h"

namespace cabin::agent {

net::awaitable<Gate::Lock> Gate::acquire() {
  if (!held_) {
    held_ = true;
    co_return Lock(this);
  }
  auto timer = std::make_shared<net::steady_timer>(ex_, net::steady_timer::time_point::max());
  waiters_.push_back(timer);
  boost::system::error_code ec;
  // Only release() cancels it, and it leaves held_ set: the gate is ours now.
  co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
  co_return Lock(this);
}

void Gate::release() {
  if (waiters_.empty()) {
    held_ = false;
    return;
  }
  auto next = std::move(waiters_.front());
  waiters_.pop_front();
  next->cancel();
}

Desktop::Desktop(net::any_io_executor ex, std::function<std::string()> display_name)
    : display_name_(std::move(display_name)), gate_(std::move(ex)) {}

Desktop::~Desktop() { close(); }

void Desktop::close() {
  input_.reset();
  capturer_.reset();
  display_.reset();
}

Result<void> Desktop::open() {
  if (display_ && display_->lost()) close();
  if (display_) return {};
  const std::string name = display_name_();
  if (name.empty()) {
    return make_error(Errc::kUnavailable, "display_not_ready", "the X display is not up yet");
  }
  auto display = vnc::Display::open(name);
  if (!display) return display.error();
  display_.emplace(std::move(*display));
  auto capturer = vnc::Capturer::create(*display_);
  if (!capturer) {
    close();
    return capturer.error();
  }
  capturer_.emplace(std::move(*capturer));
  auto input = vnc::Input::create(*display_);
  if (!input) {
    close();
    return input.error();
  }
  input_.emplace(std::move(*input));
  return {};
}

vnc::Size Desktop::screen_size() const { return display_->size(); }

vnc::Input& Desktop::input() { return *input_; }

Result<void> check_shot(const ShotSpec& spec, vnc::Size screen) {
  if (spec.region) {
    const vnc::Rect& r = *spec.region;
    if (r.x < 0 || r.y < 0 || r.width <= 0 || r.height <= 0 || r.x + r.width > screen.width ||
        r.y + r.height > screen.height) {
      return make_error(Errc::kInvalidArgument, "bad_region",
                        "region " + std::to_string(r.width) + "x" + std::to_string(r.height) + "+" +
                            std::to_string(r.x) + "+" + std::to_string(r.y) +
                            " does not lie inside the " + std::to_string(screen.width) + "x" +
                            std::to_string(screen.height) + " screen");
    }
  }
  const vnc::Size source =
      spec.region ? vnc::Size{spec.region->width, spec.region->height} : screen;
  const vnc::Size out = spec.size.value_or(source);
  if (int64_t{out.width} * out.height > kMaxImagePixels) {
    return make_error(Errc::kInvalidArgument, "image_too_large",
                      "the image would exceed " + std::to_string(kMaxImagePixels) + " pixels");
  }
  return {};
}

Result<double> grab_shot(vnc::Capturer& capturer, vnc::Image& frame, const ShotSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  if (auto r = capturer.grab(frame, spec.region, spec.cursor); !r) return r.error();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Result<EncodedImage> encode_shot(const vnc::Image& frame, const ShotSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<vnc::Image> scaled;
  if (spec.size && *spec.size != frame.size()) {
    auto s = vnc::scale(frame.view(), *spec.size);
    if (!s) return s.error();
    scaled.emplace(std::move(*s));
  }
  const vnc::ImageView view = scaled ? scaled->view() : frame.view();
  Result<std::vector<uint8_t>> bytes = std::vector<uint8_t>();
  EncodedImage img;
  if (spec.format == computer::ImageFormat::kJpeg) {
    bytes = vnc::encode_jpeg(view, vnc::JpegOptions{.quality = spec.quality});
    img.media_type = "image/jpeg";
  } else {
    bytes = vnc::encode_png(view);
    img.media_type = "image/png";
  }
  if (!bytes) return bytes.error();
  img.bytes.assign(bytes->begin(), bytes->end());
  img.width = view.width;
  img.height = view.height;
  img.encode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return img;
}

Result<EncodedImage> shoot(vnc::Capturer& capturer, vnc::Image& frame, const ShotSpec& spec) {
  auto grab_ms = grab_shot(capturer, frame, spec);
  if (!grab_ms) return grab_ms.error();
  auto img = encode_shot(frame, spec);
  if (img) img->grab_ms = *grab_ms;
  return img;
}

Result<EncodedImage> Desktop::screenshot(const ShotSpec& spec) {
  if (auto r = open(); !r) return r.error();
  if (auto r = check_shot(spec, display_->size()); !r) return r.error();
  return shoot(*capturer_, frame_, spec);
}

}  // namespace cabin::agent
